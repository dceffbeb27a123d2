"""The domains as a reader shows them: one frame of facts per registered domain, and the pass-rate
verdict rule, for the dashboard (which reads only storage and evaluation's readers, never the
registry or the gates themselves).

- :func:`catalog` is the registry for a plugin path as a frame: owner, tags, protected,
  description, context tokens, whether it has a verifier, the learned reward it declares and its
  bar, and the difficulty band the gates apply (``gate_thresholds`` overrides, else
  :data:`quality.difficulty.DEFAULT_BAND`), plus the plugin errors;
- :func:`reward_bar_shortfall` says whether a domain's newest reward-gate check met its declared bar;
- :func:`pass_rate_verdicts` judges stored pass rates against a band exactly as the gate would
  (:func:`quality.difficulty.pass_rate_verdict`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Sequence

import polars as pl

from domains.registry import configured_domains_path, get_registry
from quality.difficulty import DEFAULT_BAND, Band, pass_rate_verdict

SCHEMA = {"domain": pl.Utf8, "owner": pl.Utf8, "tags": pl.List(pl.Utf8), "protected": pl.Boolean,
          "description": pl.Utf8, "context_tokens": pl.Int64, "difficulty_min": pl.Float64,
          "difficulty_max": pl.Float64, "verifier": pl.Boolean, "learned_reward": pl.Utf8,
          "learned_reward_gate": pl.Utf8}


@dataclass(frozen=True)
class Catalog:
    domains: pl.DataFrame                        # one row per domain (SCHEMA)
    errors: list[str] = field(default_factory=list)  # plugins that failed to load, as a person reads them

    def band(self, domain: str) -> tuple[float, float]:
        """``(difficulty_min, difficulty_max)`` of ``domain``; the gates' default when unknown."""
        row = self.domains.filter(pl.col("domain") == domain) if self.domains.height else self.domains
        return (row["difficulty_min"][0], row["difficulty_max"][0]) if row.height else DEFAULT_BAND


def domains_path() -> str | None:
    """The plugin path the registry reads when none is named (``$ASSAY_DOMAINS_PATH``)."""
    return configured_domains_path()


def catalog(domains_path: str | None) -> Catalog:
    """The registry of built-ins plus the plugins under ``domains_path`` (None or "": built-ins only)."""
    registry = get_registry(domains_path or "")
    rows = []
    for d in registry:
        band = Band.for_domain(d)
        rows.append({"domain": d.name, "owner": d.owner, "tags": list(d.tags), "protected": d.protected,
                     "description": d.description, "context_tokens": d.context_tokens,
                     "difficulty_min": band.low, "difficulty_max": band.high, "verifier": d.has_verifier,
                     # the declared reward model ("latest" or an id), None when the verifier alone rewards
                     "learned_reward": d.learned_reward.reward_model if d.learned_reward is not None else None,
                     # its declared bar (LearnedReward.gate overrides, JSON), what a check must have met
                     "learned_reward_gate": (json.dumps(d.learned_reward.gate, sort_keys=True, default=str)
                                             if d.learned_reward is not None else None)})
    return Catalog(pl.DataFrame(rows, schema=SCHEMA), [str(e) for e in registry.errors])


def reward_bar_shortfall(catalog: Catalog, domain: str, gate_rows: list[dict]) -> list[str]:
    """Where ``domain``'s newest reward-gate check (its rows) ran under a laxer bar than the domain
    declares, as GRPO judges it (:func:`quality.reward_gate.bar_shortfall`); empty when it did not."""
    from quality.reward_gate import bar_shortfall
    from quality.reward_gate_config import GateDeclarationError, gate_from_declaration

    row = catalog.domains.filter(pl.col("domain") == domain) if catalog.domains.height else catalog.domains
    declared = json.loads(row["learned_reward_gate"][0]) if row.height and row["learned_reward_gate"][0] else {}
    try:
        required = gate_from_declaration(domain, declared)
    except GateDeclarationError as exc:
        return [str(exc)]
    return bar_shortfall(gate_rows, required)


def pass_rate_verdicts(passes: Sequence[int], samples: Sequence[int], band: tuple[float, float]) -> list[str]:
    """Each item's verdict (``in_band``, ``too_easy``, ``too_hard``) against ``band``, as the gate decides."""
    rule = Band(*band)
    return [pass_rate_verdict(p, k, rule) for p, k in zip(passes, samples)]
