"""Compare like with like: are two sweeps of a domain scored under the same generation config?

A sweep records, per sample, ``gen_config`` (a short hash) and ``gen_params`` (the same thing as
readable JSON: the sampling parameters and the prompt format, see :func:`gen_identity`). Two
checkpoints' scores on a domain are comparable only when both were generated with the same
config: greedy decoding at 64 tokens and sampling at 256 tokens measure different things, and a
difference between them says nothing about the checkpoints.

- :func:`gen_identity` builds ``(gen_config, gen_params)`` from the parameters (the sweep's key);
- :func:`describe_difference` names the fields that differ, e.g.
  ``max_new_tokens: 64 vs 256; temperature: 0.0 vs 0.7`` (baseline vs candidate);
- :func:`incomparable_domains` finds, in two per-sample result frames, the domains whose configs
  differ. Rows without ``gen_config``/``gen_params`` (another harness's output, older lake data)
  are of unknown config and compared as before: only a *recorded* difference makes a domain
  not comparable.

Pure functions on plain data (no training code): the regression report, the promotion, the
``assay regress`` CLI and the dashboard all use them.
"""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from generation.contract import gen_identity  # noqa: F401 (defined below training and evaluation, named here as before)

# the order fields are named in a difference (the rest follow alphabetically)
FIELD_ORDER = ("prompt_format", "max_new_tokens", "temperature", "top_p", "top_k", "stop")




def _params(text: str | None) -> dict | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _show(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(json.dumps(v) for v in value) + "]"
    return str(value)


def describe_difference(baseline: tuple[str | None, str | None], candidate: tuple[str | None, str | None]) -> str:
    """The fields that differ between two ``(gen_config, gen_params)``, baseline value first.
    Without readable parameters on a side, the hashes are named instead."""
    b, c = _params(baseline[1]), _params(candidate[1])
    if b is None or c is None:
        return f"gen_config: {baseline[0] or 'unrecorded'} vs {candidate[0] or 'unrecorded'} (parameters not recorded)"
    names = [f for f in FIELD_ORDER if f in b or f in c] + sorted((set(b) | set(c)) - set(FIELD_ORDER))
    parts = [f"{name}: {_show(b.get(name))} vs {_show(c.get(name))}" for name in names if b.get(name) != c.get(name)]
    return "; ".join(parts) or f"gen_config: {baseline[0]} vs {candidate[0]} (same parameters, different hash)"


def _configs(frame: pl.DataFrame) -> dict[str, list[tuple[str | None, str | None]]]:
    """domain -> the distinct recorded (gen_config, gen_params) of its rows (empty: none recorded)."""
    if "domain" not in frame.columns or not ({"gen_config", "gen_params"} & set(frame.columns)):
        return {}
    cols = [pl.col("domain").cast(pl.Utf8)]
    for name in ("gen_config", "gen_params"):
        cols.append(pl.col(name).cast(pl.Utf8) if name in frame.columns else pl.lit(None, dtype=pl.Utf8).alias(name))
    found = frame.select(cols).unique().filter(pl.col("gen_config").is_not_null() | pl.col("gen_params").is_not_null())
    out: dict[str, list] = {}
    for domain, config, params in found.sort("domain", "gen_config", "gen_params", nulls_last=True).iter_rows():
        out.setdefault(domain, []).append((config, params))
    return out


def _key(config: tuple[str | None, str | None]) -> str:
    """Identity of a config: its hash when recorded, else its canonical parameters."""
    if config[0] is not None:
        return config[0]
    params = _params(config[1])
    return json.dumps(params, sort_keys=True) if params is not None else str(config[1])


def incomparable_domains(baseline: pl.DataFrame, candidate: pl.DataFrame) -> dict[str, str]:
    """domain -> why its two sides are not comparable (only domains both sides scored)."""
    base, cand = _configs(baseline), _configs(candidate)
    out = {}
    for domain in sorted(set(base) & set(cand)):
        b, c = base[domain], cand[domain]
        mixed = [f"{side} mixes {len(v)} generation configs ({', '.join(_key(x) for x in v)})"
                 for side, v in (("baseline", b), ("candidate", c)) if len({_key(x) for x in v}) > 1]
        if mixed:
            out[domain] = "; ".join(mixed)
        elif _key(b[0]) != _key(c[0]):
            out[domain] = describe_difference(b[0], c[0])
    return out
