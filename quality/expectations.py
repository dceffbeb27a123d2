"""Batch gates as Great Expectations 1.x suites: one suite per gate kind, parameterised per domain.

Suites are built once per process; thresholds are ``{"$PARAMETER": name}`` filled per domain from
:func:`gate_parameters`, i.e. the domain's ``gate_thresholds`` over the defaults below. Every
suite sees the **incoming** batch only (the batches no evaluation has judged yet, see
:mod:`quality.batch_gates`), never the rows of earlier batches:

- ``format`` on its admitted rows: schema, non-null, prompt length band, unique ids (ingest
  already quarantines an id the domain holds from another batch), the answer format (the
  domain's ``answer_pattern`` regex, or "any non-blank text"), a minimum row count.
- ``safety`` on the incoming batch (admitted + quarantined rows): zero admitted rows with a
  safety flag (re-scanned with the rule-based safety detectors), and the flagged share of the
  incoming batch under ``max_safety_flagged_fraction``: a batch that is mostly bad is a signal.
- ``difficulty`` on the difficulty estimates of its admitted train rows: values in [0, 1], the
  in-band share at least ``min_in_band_fraction``, under the ``policy`` estimate (measured pass
  rates) the mean pass rate within ``[min_mean_pass_rate, max_mean_pass_rate]`` (both critical: a
  batch the policy all solves or all fails teaches GRPO nothing), the zero-signal share (items
  every sample solves or fails) at most ``max_zero_signal_fraction``, and (warning) the quantiles within
  ``difficulty_quantile_tolerance`` of the last accepted batch: the one expectation that consults
  an earlier batch, as a drift signal that never blocks.

Severity: each expectation is ``critical`` or ``warning``. GE marks a suite failed even when only
a warning fails, so :func:`gate_severity` maps them: any critical failure -> ``ERROR`` (a
blocking Dagster check: downstream training stops), only warnings -> ``WARN``, else passed.

A failed difficulty expectation carries a ``message`` that says what to do (:func:`difficulty_advice`:
harder or easier items, more samples, another policy); it reaches ``gate_results.message``, the
Dagster check metadata (``what_to_do``) and the demo's output.

``great_expectations`` takes 5-7 s to import: it is imported inside the functions here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import pandas as pd

from storage.markdown import markdown_table

GATES = ("format", "safety", "difficulty")

DEFAULTS: dict[str, float] = {
    "min_rows": 1,
    "min_prompt_chars": 1,
    "max_safety_flagged_fraction": 0.2,
    "min_in_band_fraction": 0.5,
    "min_mean_pass_rate": 0.1,
    "max_mean_pass_rate": 0.9,
    "max_zero_signal_fraction": 0.5,
    "difficulty_quantile_tolerance": 0.15,
}

FORMAT_COLUMNS = ["domain", "split", "id", "prompt", "answer", "metadata", "source", "line", "batch",
                  "content_hash", "ingested_at"]


@dataclass
class ExpectationOutcome:
    gate: str
    expectation: str
    severity: str          # critical | warning | info
    success: bool
    observed: str          # JSON text of the observed value / unexpected count
    threshold: str         # JSON text of the kwargs that decide it
    rows_checked: int | None
    rows_failed: int | None
    failed_ids: list[str]
    message: str = ""      # what to do when it failed (empty: nothing beyond the expectation itself)


def gate_parameters(domain: Any) -> dict[str, Any]:
    """Suite parameters for ``domain``: defaults, the domain's settings, its overrides."""
    params: dict[str, Any] = dict(DEFAULTS)
    # the too_long estimate (3 bytes per token), inverted; a long-context domain's prompts were
    # counted exactly by the row gate and run ~4.4 characters per SmolLM2 token of English, so
    # its batch-level bound is a looser safety net (no BPE token of this vocabulary exceeds ~8)
    chars_per_token = 8 if getattr(domain, "context_tokens", None) else 3
    params["max_prompt_chars"] = int(domain.max_prompt_tokens) * chars_per_token
    params["answer_regex"] = f"^(?:{domain.answer_pattern})$" if domain.answer_pattern else r"\S"
    for key, value in (domain.gate_thresholds or {}).items():
        if key in params:
            params[key] = value
    return params


def _p(name: str) -> dict:
    return {"$PARAMETER": name}


def _suite_specs() -> dict[str, list]:
    import great_expectations as gx

    E = gx.expectations
    return {
        "format": [
            E.ExpectTableColumnsToMatchSet(column_set=FORMAT_COLUMNS, exact_match=False, severity="critical"),
            *[E.ExpectColumnValuesToNotBeNull(column=c, severity="critical") for c in ("id", "prompt", "answer")],
            E.ExpectColumnValueLengthsToBeBetween(column="prompt", min_value=_p("min_prompt_chars"),
                                                  max_value=_p("max_prompt_chars"), severity="critical"),
            E.ExpectColumnValuesToBeUnique(column="id", severity="critical"),
            E.ExpectColumnValuesToMatchRegex(column="answer", regex=_p("answer_regex"), severity="critical"),
            E.ExpectColumnValuesToBeInSet(column="split", value_set=["train", "eval"], severity="critical"),
            E.ExpectTableRowCountToBeBetween(min_value=_p("min_rows"), severity="warning"),
        ],
        "safety": [
            E.ExpectColumnValuesToBeInSet(column="admitted_flagged", value_set=[False], severity="critical"),
            E.ExpectColumnMeanToBeBetween(column="incoming_flagged", min_value=0.0,
                                          max_value=_p("max_safety_flagged_fraction"), severity="critical"),
        ],
        "difficulty": [
            E.ExpectColumnValuesToBeBetween(column="difficulty", min_value=0.0, max_value=1.0, severity="critical"),
            E.ExpectColumnMeanToBeBetween(column="in_band_num", min_value=_p("min_in_band_fraction"),
                                          max_value=1.0, severity="critical"),
            E.ExpectColumnMeanToBeBetween(column="pass_rate", min_value=_p("min_mean_pass_rate"),
                                          max_value=_p("max_mean_pass_rate"), severity="critical"),
            E.ExpectColumnMeanToBeBetween(column="zero_signal", min_value=0.0,
                                          max_value=_p("max_zero_signal_fraction"), severity="warning"),
            E.ExpectColumnQuantileValuesToBeBetween(column="difficulty", quantile_ranges=_p("quantile_ranges"),
                                                    severity="warning"),
        ],
    }


@lru_cache(maxsize=1)
def _context():
    import logging

    import great_expectations as gx

    logging.getLogger("great_expectations").setLevel(logging.ERROR)
    context = gx.get_context(mode="ephemeral")
    try:  # progress bars would spam Dagster's captured logs
        from great_expectations.data_context.types.base import ProgressBarsConfig

        context.variables.progress_bars = ProgressBarsConfig(globally=False)
    except Exception:  # noqa: BLE001 - cosmetic only
        pass
    source = context.data_sources.add_pandas("assay")
    batches = {}
    specs = _suite_specs()
    # variants: the first accepted batch of a domain has nothing to compare quantiles with; the
    # heuristic estimate has no pass rate to average (none is made up)
    for name in DIFFICULTY_SUITES:
        specs[name] = [e for e in _suite_specs()["difficulty"]
                       if not ("first" in name and e.expectation_type == "expect_column_quantile_values_to_be_between")
                       and not ("heuristic" in name and getattr(e, "column", None) == "pass_rate")]
    del specs["difficulty"]
    for gate in GATES:
        asset = source.add_dataframe_asset(gate)
        batches[gate] = asset.add_batch_definition_whole_dataframe(gate)
    for gate, expectations in specs.items():
        suite = gx.ExpectationSuite(name=gate)
        for expectation in expectations:
            suite.add_expectation(expectation)
        context.suites.add(suite)
    return context, batches


DIFFICULTY_SUITES = ("difficulty-policy", "difficulty-policy-first", "difficulty-heuristic", "difficulty-heuristic-first")


def suite_name(gate: str, params: dict[str, Any]) -> str:
    """The suite that judges ``gate`` under ``params`` (the difficulty suite has variants)."""
    if gate != "difficulty":
        return gate
    estimate = "policy" if params.get("difficulty_estimate") == "policy" else "heuristic"
    return f"difficulty-{estimate}" + ("-first" if params.get("quantile_ranges") is None else "")


def suite_expectations(gate: str) -> list[str]:
    context, _ = _context()
    name = "difficulty-policy" if gate == "difficulty" else gate
    return [e.expectation_type for e in context.suites.get(name).expectations]


def _jsonable(value: Any) -> str:
    return json.dumps(value, default=str, sort_keys=True)


def run_suite(gate: str, frame: pd.DataFrame, params: dict[str, Any]) -> list[ExpectationOutcome]:
    """Validate ``frame`` with the ``gate`` suite; expectations whose parameter is absent (no
    previous batch for the quantile check) are skipped, not faked."""
    context, batches = _context()
    suite = context.suites.get(suite_name(gate, params))
    id_cols = ["id"] if "id" in frame.columns else []
    batch = batches[gate].get_batch(batch_parameters={"dataframe": frame})
    result = batch.validate(suite, expectation_parameters=params, result_format={
        "result_format": "COMPLETE", "unexpected_index_column_names": id_cols, "partial_unexpected_count": 0})
    outcomes = []
    for r in result.results:
        config = r.expectation_config
        kwargs = {k: v for k, v in config.kwargs.items() if k not in ("batch_id", "column")}
        res = r.result or {}
        unexpected = res.get("unexpected_index_list") or []
        failed_ids = [str(u.get("id")) for u in unexpected if isinstance(u, dict) and "id" in u][:50]
        observed = res.get("observed_value", {"unexpected_count": res.get("unexpected_count")})
        column = config.kwargs.get("column")
        name = config.type + (f"({column})" if column else "")
        outcomes.append(ExpectationOutcome(
            gate=gate, expectation=name, severity=str(getattr(config.severity, "value", config.severity)).lower(),
            success=bool(r.success), observed=_jsonable(observed), threshold=_jsonable(kwargs),
            rows_checked=res.get("element_count", len(frame)), rows_failed=res.get("unexpected_count"),
            failed_ids=failed_ids,
        ))
        if r.exception_info and r.exception_info.get("raised_exception"):
            outcomes[-1].success = False
            outcomes[-1].observed = _jsonable({"exception": r.exception_info.get("exception_message")})
    return outcomes


def _mean(observed: str) -> float | None:
    try:
        value = json.loads(observed)
    except (TypeError, ValueError):
        return None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def difficulty_advice(outcome: ExpectationOutcome, params: dict[str, Any], verdicts: dict[str, int]) -> str:
    """What to do about a failed difficulty expectation, ``"<what failed>: <what to do>"`` in one
    line (empty when it passed or when there is nothing to add). ``verdicts``: counts of
    ``in_band`` / ``too_easy`` / ``too_hard``."""
    if outcome.success or outcome.gate != "difficulty":
        return ""
    policy = params.get("difficulty_estimate") == "policy"
    try_one = "policy_pass_rates config `policy`; try one with `assay difficulty --policy`"
    other = (f"measure with another policy ({try_one})" if policy
             else "measure difficulty on the policy (policy_pass_rates config estimate=policy)")
    easier = "add easier items, raise K (`samples`), or " + (f"measure with a stronger policy ({try_one})" if policy
                                                            else other)
    harder = f"add harder items, raise K (`samples`), or {other}"
    observed = _mean(outcome.observed)
    if "(pass_rate)" in outcome.expectation and observed is not None:
        low, high = params["min_mean_pass_rate"], params["max_mean_pass_rate"]
        if observed > high:
            return f"mean pass rate {observed:.2f} > {high:.2f}: {harder}"
        return f"mean pass rate {observed:.2f} < {low:.2f}: {easier}"
    if "(in_band_num)" in outcome.expectation and observed is not None:
        easy, hard = verdicts.get("too_easy", 0), verdicts.get("too_hard", 0)
        n = sum(verdicts.values())
        what = f"in-band share {observed:.2f} < {params['min_in_band_fraction']:.2f} ({easy} too easy, {hard} too hard " \
               f"of {n}{'' if policy else ', heuristic estimate'})"
        return f"{what}: {harder if easy >= hard else easier}"
    return ""


def combined_advice(messages: list[str]) -> str:
    """Several ``"<what failed>: <what to do>"`` messages as one line, each remedy said once."""
    facts, remedies = [], []
    for message in messages:
        fact, _, remedy = message.partition(": ")
        facts.append(fact)
        if remedy and remedy not in remedies:
            remedies.append(remedy)
    return "; ".join(facts) + (": " + " | ".join(remedies) if remedies else "")


def gate_severity(outcomes: list[ExpectationOutcome]) -> str | None:
    """``"ERROR"`` if a critical expectation failed, ``"WARN"`` if only warnings failed, else None."""
    failed = [o for o in outcomes if not o.success]
    if any(o.severity == "critical" for o in failed):
        return "ERROR"
    return "WARN" if failed else None


def outcomes_markdown(outcomes: list[ExpectationOutcome]) -> str:
    """The outcomes as a markdown table (Dagster check metadata, the gate run's ``expectations.md``)."""
    rows = [{"expectation": o.expectation, "severity": o.severity, "observed": o.observed, "threshold": o.threshold,
             "result": "pass" if o.success else "**FAIL**"} for o in outcomes]
    return markdown_table(rows, ["expectation", "severity", "observed", "threshold", "result"], width=70,
                          widths={"severity": None, "result": None})
