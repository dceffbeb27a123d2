"""Training rows per domain: the gated ``train_set`` lake table, or (CLI only) the domain itself.

One rule decides whether a domain's ``train_set`` may be trained on
(:func:`quality.gate_history.train_set_problem`): the domain's **latest** gate evaluation passed
and the train set was built after it. A domain whose latest gates failed therefore has no train
set until a later evaluation passes: training refuses it with the failed gates named (for the CLI
too: it does not fall back to generated rows for a domain the gates have judged), never the
previous train set silently.

The Dagster asset trains only on such train sets and refuses a domain without one. The CLI may
generate a domain's train split directly with ``Domain.generate("train", n, seed)`` when the
domain has no train set and no gate results yet, and says so.

A domain that declares a learned reward (``Domain.learned_reward``) is refused here too unless
its reward model's newest gate check passed (:func:`training.learned_rewards.gated_reward_model`);
the gated reward model is kept in :attr:`TrainingData.reward_models` and its id enters the domain's
fingerprint.

Rows are sorted by id, so the run (the mixture's shuffled order) depends on which rows there are,
not on how the lake happened to store them. Each domain's rows get a fingerprint
(:func:`rows_fingerprint`) that becomes part of the run's identity (``training.trainer``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from storage import tables
from quality.gate_history import train_set_problem
from storage.lake import Lake
from storage.errors import UserError

TRAIN_SET_TABLE = "train_set"


class TrainingDataError(UserError, ValueError):
    """A domain without usable training rows."""


def rows_fingerprint(rows: list[dict]) -> str:
    """Order-independent fingerprint of training rows: their ids and exact content.

    Per row a digest of (id, prompt, answer, metadata); the digests are sorted and hashed, so the
    same rows in any order give the same value and any changed, added or removed row another.
    About 1 s per million rows.
    """
    digests = sorted(
        hashlib.blake2b(json.dumps([r["id"], r["prompt"], r["answer"], r.get("metadata") or {}], sort_keys=True,
                                   ensure_ascii=False, default=str).encode(), digest_size=16).digest()
        for r in rows)
    return hashlib.sha256(b"".join(digests)).hexdigest()[:16]


def combined_fingerprint(fingerprints: dict[str, str]) -> str:
    """One fingerprint for several domains' rows (the domain names included)."""
    text = "\n".join(f"{name}={fp}" for name, fp in sorted(fingerprints.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class TrainingData:
    rows: dict[str, list[dict]] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # domain -> "train_set" | "generated"
    fingerprints: dict[str, str] = field(default_factory=dict)  # domain -> rows_fingerprint
    evaluations: dict[str, str] = field(default_factory=dict)  # domain -> gate evaluation of its train_set
    # domain -> its gated learned reward {"reward_model", "path", "weight", "gate_check"}
    reward_models: dict[str, dict] = field(default_factory=dict)

    def describe(self) -> str:
        return ", ".join(f"{d}: {len(r)} rows from {self.sources[d]}" for d, r in self.rows.items())

    def fingerprint(self) -> str:
        return combined_fingerprint(self.fingerprints)

    def manifest(self) -> dict[str, dict]:
        """Per domain: rows, source, fingerprint (and the gate evaluation for a train_set)."""
        out = {}
        for name, rows in self.rows.items():
            out[name] = {"rows": len(rows), "source": self.sources[name], "fingerprint": self.fingerprints[name]}
            if name in self.evaluations:
                out[name]["evaluation"] = self.evaluations[name]
            if name in self.reward_models:
                out[name]["reward_model"] = self.reward_models[name]["reward_model"]
                out[name]["reward_gate_check"] = self.reward_models[name]["gate_check"]
        return out


def train_set_rows(lake: Lake, domain: str) -> tuple[list[dict], list[str]]:
    """The domain's train_set rows (sorted by id) and the distinct gate evaluations they name."""
    frame = lake.read(TRAIN_SET_TABLE, where={"domain": domain})
    if frame.is_empty():
        return [], []
    frame = tables.conform(frame, tables.TRAIN_SET).sort("id")
    rows = []
    for row in frame.iter_rows(named=True):
        meta = row.get("metadata")
        rows.append({"id": row["id"], "prompt": row["prompt"], "answer": row["answer"],
                     "metadata": json.loads(meta) if meta else {}})
    return rows, sorted(set(frame["evaluation"].drop_nulls().to_list()))


def load_training_data(domains: list[str], lake: Lake, *, registry=None, allow_generate: bool,
                       generate_n: int = 256, seed: int = 0) -> TrainingData:
    """Rows per domain (a usable train_set first); ``allow_generate`` falls back to the domain's
    generator for a domain the gates have never judged."""
    from domains import get_registry

    registry = registry or get_registry()
    if not domains:
        raise TrainingDataError("no domains selected: pass --domains a,b or set `domains:` in the recipe")
    data = TrainingData()
    for name in domains:
        domain = registry.get(name)  # UnknownDomainError names the known ones
        rows, evaluations = train_set_rows(lake, name)
        problem = train_set_problem(lake, name, evaluations)
        if problem:
            raise TrainingDataError(problem)
        if rows:
            data.rows[name], data.sources[name] = rows, TRAIN_SET_TABLE
            data.evaluations[name] = evaluations[0]
        elif not allow_generate:
            raise TrainingDataError(
                f"domain {name!r} has no train_set in the lake: materialize domain_samples, "
                f"gated_samples and domain_train_set for partition {name!r} first (its gates must pass)"
            )
        else:
            generated = domain.generate("train", generate_n, seed)
            if not generated:
                raise TrainingDataError(f"domain {name!r} generated no train samples")
            data.rows[name], data.sources[name] = generated, "generated"
        data.fingerprints[name] = rows_fingerprint(data.rows[name])
        if getattr(domain, "learned_reward", None) is not None:  # refused unless its reward model passed its gate
            from training.learned_rewards import gated_reward_model

            gated = gated_reward_model(lake, domain)
            data.reward_models[name] = gated
            data.fingerprints[name] = combined_fingerprint({"rows": data.fingerprints[name],
                                                            "reward_model": gated["reward_model"],
                                                            "weight": str(gated["weight"])})
    return data
