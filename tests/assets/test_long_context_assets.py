"""A long-context bucket through the Dagster stages: generated rows ingested with the policy's
token counts (nothing quarantined as too_long at 2k tokens), gated by the GE suites and written as
the train set; the same rows would all be too_long under the byte estimate."""

from __future__ import annotations

import dataclasses

import dagster as dg
import polars as pl

DOMAIN = "long_multikey_2k"


def test_a_long_context_partition_is_ingested_gated_and_becomes_a_train_set(assay_home, monkeypatch):
    from assets.ingest import domain_samples
    from assets.quality import domain_train_set, gated_samples
    from domains import get_registry
    from domains.registry import Registry
    from assets.resources import default_resources
    from quality.normalize import estimate_tokens
    from storage.lake import Lake

    registry = get_registry()
    subset = Registry()  # contamination against these buckets only, 8 eval items each: keeps the test fast
    for name in (DOMAIN, "long_needle_2k"):
        subset.domains[name] = dataclasses.replace(registry.get(name), eval_size=8)
        subset.sources[name] = registry.sources[name]
    monkeypatch.setattr("assets.ingest.get_registry", lambda: subset)
    config = {"ops": {"domain_samples": {"config": {"train_samples": 8}},
                      "gated_samples": {"config": {"selftest_samples": 4, "log_to_mlflow": False}}}}
    with dg.instance_for_test() as instance:
        result = dg.materialize([domain_samples, gated_samples, domain_train_set], partition_key=DOMAIN,
                                resources=default_resources(str(assay_home)), run_config=config,
                                raise_on_error=False, instance=instance)
    materialized = {e.asset_key.to_user_string(): e.materialization.metadata
                    for e in result.get_asset_materialization_events()}
    failed = [e.event_specific_data for e in result.all_events
              if e.event_type_value == "ASSET_CHECK_EVALUATION" and not e.event_specific_data.passed]
    assert result.success and not failed, failed
    ingest = materialized["domain_samples"]
    eval_size = 8
    assert ingest["received"].value == 8 + eval_size
    assert ingest["quarantined"].value == 0
    assert "domain_train_set" in materialized
    lake = Lake.at(assay_home)
    samples = lake.read("ingest", "samples").filter(pl.col("domain") == DOMAIN)
    assert samples.height == 8 + eval_size
    # the byte estimate the too_long gate uses for other domains would have refused every row
    assert all(estimate_tokens(p) > 2048 for p in samples["prompt"].to_list())
