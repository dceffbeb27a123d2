"""The environment report card of each domain partition (:mod:`quality.report_card`), nightly.

``environment_report_card`` cards one domain: oracle and nop, recall on equivalent correct
answers, the fixed hack families, the budgeted hack search, hidden-test strength where the domain
has hidden tests, the newest labelled audit and what the gates know; the card is written to lake
table ``report_cards`` and shown as the materialization's metadata. Its blocking check
``report_card_verdict`` fails (ERROR) when the card fails; the domain's train set is refused from
then on (:func:`quality.report_card.card.card_problem`, read by ``domain_train_set`` and by
training) until a later card passes. ``report_card_job`` runs it per domain;
``nightly_report_card_schedule`` (:mod:`pipelines.schedules`) requests every domain at 03:00 UTC.
It is its own group, outside ``domain_pipeline_job``: the demo's per-domain pipeline does not pay
for a card on every run.
"""

import dagster as dg

from assets.config_bridge import dagster_config
from assets.k8s import k8s_op_tags
from assets.partitions import domain_partitions
from assets.pools import POOL_INGEST
from assets.resources import LakeResource
from domains import get_registry
from quality.report_card.card_config import CardConfig
from storage.markdown import markdown_table

ReportCardConfig = dagster_config(CardConfig, name="ReportCardConfig")
VERDICT_CHECK = "report_card_verdict"
FIGURES = ("oracle_pass", "nop_paid", "recall", "recall_low", "recall_high", "recall_bar", "worst_family",
           "fixed_families_paid", "hack_search_tried", "hack_search_paid", "kill_rate", "weak_items", "audited_fp",
           "audited_fn", "in_band_share", "quarantine_share", "contaminated")


def _value(value):
    if value is None:
        return dg.MetadataValue.text("n/a")
    if isinstance(value, bool):
        return dg.MetadataValue.bool(value)
    if isinstance(value, int):
        return dg.MetadataValue.int(value)
    if isinstance(value, float):
        return dg.MetadataValue.float(round(value, 4))
    return dg.MetadataValue.text(str(value))


@dg.asset(
    partitions_def=domain_partitions,
    group_name="report_card",
    kinds={"parquet"},
    pool=POOL_INGEST,
    op_tags=k8s_op_tags(POOL_INGEST),
    check_specs=[dg.AssetCheckSpec(VERDICT_CHECK, asset="environment_report_card", blocking=True,
                                   description="the card passed: references paid, nops not, recall at the domain's "
                                               "bar, no hack paid (blocking: a failed card refuses the domain's "
                                               "train set until a card passes)")],
    description="A domain's environment report card: both error rates of its verifier (recall on equivalent "
                "correct answers; fixed hack families and a budgeted hack search), oracle and nop, hidden-test "
                "strength, audited rates and what the gates know. Lake table report_cards.",
)
def environment_report_card(context: dg.AssetExecutionContext, config: ReportCardConfig,
                            lake: LakeResource) -> dg.MaterializeResult:
    from quality.report_card.card import build_card, gate_facts, write_cards
    from quality.report_card.audit import latest_audit

    domain = get_registry().get(context.partition_key)
    the_lake = lake.lake(write=True)
    card = build_card(domain, config.to_library())
    if not card.skipped:
        card.audit = latest_audit(the_lake, domain.name)
        card.gate_facts = gate_facts(the_lake, domain)
    run = write_cards(the_lake, [card], source="dagster")
    row = card.row(run=run, source="dagster", created_at="")
    verdict = "skipped" if card.skipped else "passed" if card.passed else "FAILED"
    context.log.info(f"{domain.name}: report card {verdict} ({card.seconds:.1f} s)")
    table = markdown_table([{"figure": k, "value": "n/a" if row[k] is None else
                             (f"{row[k]:.4f}" if isinstance(row[k], float) else str(row[k]))} for k in FIGURES],
                           ["figure", "value"])
    evidence = card.evidence()
    metadata = {"card_run": run, "verdict": verdict, "seconds": dg.MetadataValue.float(card.seconds),
                "card": dg.MetadataValue.md(table), "evidence": dg.MetadataValue.json(evidence),
                **{k: _value(row[k]) for k in FIGURES}}
    if card.skipped:
        metadata["skipped"] = card.skipped
    check_meta = {"failures": dg.MetadataValue.md("\n".join(f"- {f}" for f in card.failures) or "none"),
                  "warnings": dg.MetadataValue.md("\n".join(f"- {w}" for w in card.warnings) or "none")}
    if card.failures:
        check_meta["what_to_do"] = dg.MetadataValue.text(
            f"fix {domain.name}'s verifier at the shared depth (answer extraction, the domain's scorer), then re-run "
            f"`assay domains report {domain.name}` or this asset; the train set stays refused until a card passes")
    check = dg.AssetCheckResult(check_name=VERDICT_CHECK, passed=card.passed is not False, metadata=check_meta,
                                severity=dg.AssetCheckSeverity.ERROR)
    return dg.MaterializeResult(metadata=metadata, check_results=[check])
