"""In-loop validation: the policy answers held-out items of every trained and watched domain while it trains.

The train reward is what GRPO optimises, so it can neither show forgetting (a domain not drawn has no
reward at all) nor tell a real gain from a hacked reward. Every ``validation.eval_every`` steps
(unset: about a tenth of the run), at step 0 and at the last step, the policy answers a fixed slice of
held-out items (the first ``validation.items`` of each domain's eval split, the items a sweep with
``--limit`` scores), greedy, ``validation.max_new_tokens`` new tokens (unset: the run's
``max_completion_length``), of:

- every domain the run trains on, and
- every *watched* domain: ``validation.watch``, unset the registry's protected domains.

Generation goes through the rollout engine already loaded (no second model in memory), after syncing
the policy's current weights into it, and through the sweep's own code path
(:func:`generation.item_scoring.generate_and_score` over a :class:`generation.item_scoring.TokenEngine`:
the same prompt formatting, token ids and ``Domain.safe_score_many`` batches), so an in-loop score
equals a sweep of that step's checkpoint on the same items with the same sampling parameters.
Domains without a verifier (a learned reward only) and terminal-episode domains are not validated
(said in the log); sweeps measure the latter.

Per validated domain and validation: ``val_score`` (the mean), and against step 0 on the same items
the change, a one-sided paired test and its BH q across the validated domains
(:mod:`training.forgetting`), in lake table ``training_history`` (``val_*`` columns,
``forgetting``) and MLflow (``val/<domain>``, ``val_delta/<domain>``, ``val_q/<domain>``,
``forgetting/<domain>``); the seconds it took in ``validation_s`` on the ``_all`` row. A flagged
domain (``forgetting``) is logged, tagged on the MLflow run (``assay.forgetting``,
``assay.forgetting.<domain>`` with the evidence), kept in the run state and written beside each
checkpoint (``assay_validation.json``); ``validation.forgetting`` then warns, stops the run or
reweights the mixture (:class:`Round`, applied on every rank by the trainer).

With learnability sampling and ``validation.replateau_steps``, a trained domain whose validation set no
new best for that many steps has its train items' pass rates measured again on the current policy
(``mixture.pass_rate_samples`` samples each with the rollouts' sampling, through the same engine),
replacing their online estimates; the log says what moved (mean rate, items solved, items learnable).

The step-0 scores and each validation's decisions are kept in the run state (``state["validation"]``),
so a resumed run compares with the same start. A resumed run whose validation settings changed (other
items or generation settings) cannot measure step 0 again: it takes its first validation as the new
start and says so.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Callable

from storage.errors import UserError
from training.forgetting import DomainValidation, judge, next_boosts, plateaued
from training.history import ALL, blank_row, row_for

VALIDATION_FILE = "assay_validation.json"  # beside each checkpoint: the validation it was saved with


class ValidationSetupError(UserError, ValueError):
    """The recipe's validation cannot run with these domains; the message says what to change."""


@dataclass
class Round:
    """What one validation measured and decided: plain data, broadcast from rank 0 to every rank."""

    step: int
    results: list[DomainValidation]
    seconds: float
    boosts: dict[str, float] | None = None  # the mixture's multipliers from the next step on (reweight)
    remeasured: dict[str, list[int]] = field(default_factory=dict)  # domain -> passes per train row
    samples: int = 0                        # K of the re-measure
    remeasure_seconds: float = 0.0
    stop: bool = False                      # forgetting: stop and a domain is flagged

    @property
    def flagged(self) -> list[DomainValidation]:
        return [r for r in self.results if r.flagged]


class Validation:
    """One run's in-loop validation: its domains and items, the step-0 start, every round's record."""

    def __init__(self, config, domains: dict, trained: list[str], state: dict, *, log: Callable[[str], None],
                 train_rows: dict[str, list[dict]] | None = None):
        from generation.contract import SamplingParams

        self.config = config
        self.settings = config.validation
        self.every = self.settings.every(config.max_steps)
        self.domains = domains                   # name -> Domain, validated
        self.trained = [d for d in trained if d in domains]
        self.log = log
        self.train_rows = train_rows or {}
        self.items = {name: domain.eval_items()[: self.settings.items] for name, domain in domains.items()}
        empty = sorted(name for name, items in self.items.items() if not items)
        if empty:
            raise ValidationSetupError(f"no eval items to validate {', '.join(empty)} on: give the domain an eval "
                                       "split, or leave it out of validation.watch")
        self.params = SamplingParams(max_new_tokens=self.settings.max_new_tokens or config.max_completion_length,
                                     temperature=0.0)
        self.state = state.setdefault("validation", {})
        self._pending_s = 0.0  # seconds of the step-0 validation, reported on the next step's "_all" row
        # this process's seconds of validation and of training steps (the budget, validation.max_share)
        self.spent_s = 0.0
        self.stepped_s = 0.0
        self._skipping = False

    # -- setup -----------------------------------------------------------------------------------

    @classmethod
    def plan(cls, config, registry, trained: dict, state: dict, *, log: Callable[[str], None],
             train_rows: dict[str, list[dict]] | None = None) -> "Validation | None":
        """The run's validation (None with ``validation.eval_every: 0`` or nothing to validate).
        ``trained``: the run's domains by name; watched names must be registered."""
        from domains import UnknownDomainError

        settings = config.validation
        if settings.every(config.max_steps) == 0:
            return None
        watch = settings.watch if settings.watch is not None else sorted(
            name for name, domain in registry.domains.items() if getattr(domain, "protected", False))
        for name in watch:
            if name not in registry.domains:
                raise UnknownDomainError(name, registry.names)
        candidates = {**trained, **{name: registry.get(name) for name in watch if name not in trained}}
        skipped = {name: "no verifier (its learned reward is its only measure)"
                   for name, domain in candidates.items() if not getattr(domain, "has_verifier", True)}
        skipped.update({name: "terminal episodes (sweep the checkpoints)" for name, domain in candidates.items()
                        if getattr(domain, "episode_task", None) is not None and name not in skipped})
        for name, why in skipped.items():
            log(f"validation: {name} is not validated in the loop: {why}")
        domains = {name: domain for name, domain in candidates.items() if name not in skipped}
        if not domains:
            return None
        return cls(config, domains, list(trained), state, log=log, train_rows=train_rows)

    def describe(self) -> str:
        watched = [d for d in self.domains if d not in self.trained]
        settings = self.settings
        budget = ("" if settings.changes_trajectory() or settings.max_share >= 1 else
                  f", skipped while validations take over {settings.max_share:.0%} of the time")
        return (f"validation every {self.every} steps (and at step 0 and the last step{budget}): "
                f"{', '.join(f'{d} ({len(self.items[d])} items)' for d in self.domains)}, greedy, "
                f"{self.params.max_new_tokens} new tokens; watched besides the trained domains: "
                f"{', '.join(watched) or 'none'}; forgetting (one-sided paired test vs step 0, BH q <= "
                f"{settings.forgetting_q:g} across them): {settings.forgetting}"
                + (f"; pass rates re-measured after {settings.replateau_steps} steps without a new best"
                   if settings.replateau_steps else ""))

    def _identity(self, engine) -> str:
        """What the step-0 scores are comparable with: the items and the generation settings."""
        from generation.item_scoring import generation_config

        _, gen_params = generation_config(self.params, engine.prompt_format, self.config.rope_scaling)
        return json.dumps({"items": {d: [i["id"] for i in items] for d, items in sorted(self.items.items())},
                           "gen_params": gen_params}, sort_keys=True)

    # -- the rounds ------------------------------------------------------------------------------

    def due(self, step: int) -> bool:
        """Whether a validation is scheduled after ``step`` (1-based; the step-0 one is :meth:`start`)."""
        return step % self.every == 0 or step == self.config.max_steps

    def within_budget(self, step: int, last: bool) -> bool:
        """Whether a due validation runs: always at the last step and when validation feeds back into
        training; otherwise only while validations have taken at most ``validation.max_share`` of this
        process's step and validation seconds (the log says when one is skipped, and when they resume)."""
        if last or step == self.config.max_steps or self.settings.changes_trajectory():
            return True
        total = self.spent_s + self.stepped_s
        share = self.spent_s / total if total > 0 else 0.0
        if share <= self.settings.max_share:
            if self._skipping:
                self.log(f"validation resumes at step {step}: validations now {share:.1%} of the run's time")
            self._skipping = False
            return True
        if not self._skipping:
            self.log(f"validation at step {step} skipped: validations took {self.spent_s:.0f} s, {share:.1%} of this "
                     f"run's {total:.0f} s of steps and validations (validation.max_share {self.settings.max_share:g}); "
                     "it resumes once they are back under it (and always runs at the last step)")
        self._skipping = True
        return False

    def needs_start(self) -> bool:
        return "start" not in self.state

    def start(self, engine, run_id: str | None) -> list[dict]:
        """The step-0 validation of a new run: the scores every later one is tested against. Returns
        its history rows (step 0, validation columns only)."""
        began = time.perf_counter()
        scores = self._measure(engine, 0)
        results = judge(0, scores, scores, set(self.trained), q_level=self.settings.forgetting_q)
        # a trained domain plateaus when no validation beats its step-0 score for replateau_steps steps
        plateau = {r.domain: {"best": r.score, "since": 0} for r in results if r.trained}
        self.state.update({"start": scores, "start_step": 0, "identity": self._identity(engine),
                           "flagged": {}, "plateau": plateau, "remeasures": []})
        self.state["latest"] = {"step": 0, "results": [r.evidence() for r in results], "scores": scores}
        self._pending_s = time.perf_counter() - began
        self.spent_s += self._pending_s
        self.log(f"validation at step 0 ({self._pending_s:.1f} s): " + "; ".join(r.describe() for r in results))
        rows = []
        for result in results:
            row = blank_row(run_id, 0, result.domain)
            row.update({"val_score": result.score, "val_n": float(result.n)})
            rows.append(row)
        return rows

    def run(self, step: int, engine, rows: list[dict], *, mixture=None, tracker=None,
            run_id: str | None = None) -> Round:
        """The validation after ``step``: measure, test against step 0, decide (flags, boosts, a stop,
        re-measures), mark the step's ``rows`` and tag MLflow (rank 0). The caller applies the
        returned :class:`Round` to the mixture on every rank (:meth:`apply`)."""
        began = time.perf_counter()
        scores = self._measure(engine, step)
        identity = self._identity(engine)
        if self.state.get("identity") != identity:  # resumed with other validation settings
            self.log(f"validation settings changed since this run's step-{self.state.get('start_step', 0)} "
                     f"validation (items or generation settings): step {step} becomes the new start")
            self.state.update({"start": scores, "start_step": step, "identity": identity, "flagged": {},
                               "plateau": {}})
        start = self.state["start"]
        results = judge(step, start, scores, set(self.trained), q_level=self.settings.forgetting_q,
                        margin=self.settings.forgetting_margin)
        seconds = time.perf_counter() - began
        round_ = Round(step, results, seconds, stop=self.settings.forgetting == "stop" and any(r.flagged for r in results))
        if self.settings.forgetting == "reweight":
            round_.boosts = next_boosts(self.state.get("boosts", {}), results, factor=self.settings.reweight_factor,
                                        cap=self.settings.reweight_max)
        self._remeasure(round_, engine, mixture)
        self.spent_s += round_.seconds + round_.remeasure_seconds
        self._record(round_, rows, scores, run_id, tracker)
        return round_

    def apply(self, round_: Round, mixture) -> None:
        """The round's decisions on this rank's mixture: boosts from the next draw on, re-measured rates."""
        if round_.boosts is not None:
            mixture.boost(round_.step, round_.boosts)
            self.state["boosts"] = dict(round_.boosts)
        for domain, passes in round_.remeasured.items():
            mixture.remeasured(domain, passes, round_.samples)

    def account(self, rows: list[dict]) -> None:
        """The step's seconds into the budget; the step-0 validation's onto the first step's ``_all`` row."""
        overall = next((r for r in rows if r["domain"] == ALL), None)
        if overall is not None and overall.get("step_s"):
            self.stepped_s += overall["step_s"]
        if self._pending_s:
            if overall is not None:
                overall["validation_s"] = (overall.get("validation_s") or 0.0) + self._pending_s
                self._pending_s = 0.0

    # -- pieces ----------------------------------------------------------------------------------

    def _measure(self, engine, step: int) -> dict[str, dict[str, float]]:
        """``{domain: {item_id: score}}``: every domain's items answered greedily in one engine call (a
        bigger batch than one per domain), then scored in one ``safe_score_many`` batch per domain."""
        from generation.item_scoring import episode_format, generate_and_score_domains, generation_config

        parts = [(domain, [(item, [0]) for item in self.items[name]],
                  generation_config(self.params, episode_format(domain, engine.prompt_format),
                                    self.config.rope_scaling)[0])
                 for name, domain in self.domains.items()]
        frames = generate_and_score_domains(engine, parts, self.params, f"step{step:06d}", self.config.seed)
        return {name: dict(zip(frame["item_id"].to_list(), frame["score"].to_list()))
                for name, frame in zip(self.domains, frames)}

    def _remeasure(self, round_: Round, engine, mixture) -> None:
        """Pass rates of the train items of each trained domain whose validation plateaued, measured
        on the current policy with the rollouts' sampling (learnability sampling only)."""
        patience = self.settings.replateau_steps
        if not patience or mixture is None or mixture.tracker is None:
            return
        plateau = self.state.setdefault("plateau", {})
        due = [r.domain for r in round_.results
               if r.trained and r.domain in self.train_rows
               and plateaued(plateau.setdefault(r.domain, {}), round_.step, r.score, patience)]
        if not due:
            return
        from domains.base import PASS_SCORE
        from generation.contract import derive_seed
        from generation.item_scoring import generate_and_score, generation_config
        from training.learnability import rollout_sampling

        began = time.perf_counter()
        samples = self.config.mixture.pass_rate_samples
        params = rollout_sampling(self.config)
        gen_config, _ = generation_config(params, engine.prompt_format, self.config.rope_scaling)
        seed = derive_seed("assay.remeasure", self.config.seed, round_.step)
        tracker = mixture.tracker
        for domain in due:
            rows = self.train_rows[domain]
            frame = generate_and_score(engine, self.domains[domain], [(row, list(range(samples))) for row in rows],
                                       params, f"step{round_.step:06d}", gen_config, seed)
            passes: dict[str, int] = {}
            for item_id, score in zip(frame["item_id"].to_list(), frame["score"].to_list()):
                passes[item_id] = passes.get(item_id, 0) + (1 if score >= PASS_SCORE else 0)
            round_.remeasured[domain] = [passes.get(row["id"], 0) for row in rows]
            before = [tracker.rate(domain, i) for i in range(len(rows))]
            after = [k / samples for k in round_.remeasured[domain]]
            record = _moved(domain, round_.step, before, after, tracker)
            self.state.setdefault("remeasures", []).append(record)
            plateau[domain]["since"] = round_.step  # a re-measure restarts the domain's patience
            self.log(f"curriculum: {domain}'s validation set no new best for {patience} steps (best "
                     f"{plateau[domain]['best']:.3f}): re-measured its {len(rows)} train items' pass rates on the "
                     f"policy at step {round_.step} (K={samples}): {record['summary']}")
        round_.samples = samples
        round_.remeasure_seconds = time.perf_counter() - began

    def _record(self, round_: Round, rows: list[dict], scores: dict, run_id: str | None, tracker) -> None:
        """The round into the step's history rows, the run state, the log and MLflow's tags."""
        for result in round_.results:
            row = row_for(rows, run_id, round_.step, result.domain)
            row.update({"val_score": result.score, "val_delta": result.delta, "val_p": result.p, "val_q": result.q,
                        "val_n": float(result.n),
                        "forgetting": None if result.q is None else float(result.flagged)})
        overall = next((r for r in rows if r["domain"] == ALL), None)
        if overall is not None:
            overall["validation_s"] = (overall.get("validation_s") or 0.0) + round_.seconds
            if round_.remeasured:
                overall["remeasure_s"] = round_.remeasure_seconds
        self.state["latest"] = {"step": round_.step, "results": [r.evidence() for r in round_.results],
                                "scores": scores}
        flagged_before = set(self.state.get("flagged", {}))
        self.state["flagged"] = {r.domain: r.evidence() for r in round_.flagged}
        ever = sorted({*self.state.get("flagged_ever", []), *self.state["flagged"]})
        self.state["flagged_ever"] = ever
        self.log(f"validation at step {round_.step} ({round_.seconds:.1f} s): "
                 + "; ".join(r.describe() for r in round_.results))
        mode = self.settings.forgetting
        for result in round_.flagged:
            action = {"warn": "training on (validation.forgetting: warn)",
                      "stop": "stopping the run (validation.forgetting: stop)",
                      "reweight": (f"its mixture weight x{(round_.boosts or {}).get(result.domain, 1.0):g} until it "
                                   "recovers (validation.forgetting: reweight)" if result.trained else
                                   "not trained on, so not reweighted: training on")}[mode]
            again = " (still)" if result.domain in flagged_before else ""
            self.log(f"WARNING: forgetting{again} at step {round_.step}: {result.describe()} -- {action}")
        for domain in sorted(flagged_before - set(self.state["flagged"])):
            self.log(f"validation: {domain} recovered at step {round_.step} (no longer significantly below step 0)"
                     + (": back to its own mixture weight" if mode == "reweight" else ""))
        if tracker is not None and (round_.flagged or flagged_before):
            tracker.set_tags({"assay.forgetting": ",".join(ever),
                              **{f"assay.forgetting.{r.domain}": json.dumps(r.evidence()) for r in round_.flagged}})


def summary_of(state: dict) -> dict:
    """The latest validation and the forgetting flags of a run state (``state["validation"]``), for the
    result, the CLI, the Dagster metadata and the checkpoint: ``{"step", "results", "flagged",
    "flagged_ever", "boosts", "remeasures"}``; empty without validation."""
    validation = state.get("validation") or {}
    latest = validation.get("latest")
    if not latest:
        return {}
    return {"step": latest["step"], "start_step": validation.get("start_step", 0), "results": latest["results"],
            "flagged": validation.get("flagged", {}), "flagged_ever": validation.get("flagged_ever", []),
            "boosts": validation.get("boosts", {}), "remeasures": validation.get("remeasures", [])}


def progress_of(state: dict, width: int = 14) -> str:
    """The latest validation in a few characters per domain, for the progress bar: score and change
    since step 0, ``!`` where forgetting is flagged, e.g. ``math_arith_eas .42(+.08) safety_refusa .30(-.02!)``."""
    latest = (state.get("validation") or {}).get("latest")
    if not latest:
        return "n/a"
    parts = []
    for result in latest["results"]:
        text = f"{result['domain'][:width]} {result['score']:.2f}".replace("0.", ".", 1)
        if result.get("delta") is not None:
            text += f"({result['delta']:+.2f}{'!' if result.get('flagged') else ''})".replace("0.", ".", 1)
        parts.append(text)
    return f"@{latest['step']} " + " ".join(parts)


def _moved(domain: str, step: int, before: list[float], after: list[float], tracker) -> dict:
    """What a re-measure changed in a domain's pass rates, as a record and one line."""
    from training.learnability import learnability

    solved_at = tracker.solved_at
    floor = tracker.floor

    def counts(rates):
        solved = sum(solved_at is not None and p >= solved_at for p in rates)
        learnable = sum(not (solved_at is not None and p >= solved_at) and learnability(p) > floor for p in rates)
        return solved, learnable

    (solved_b, learn_b), (solved_a, learn_a) = counts(before), counts(after)
    moved = sum(abs(a - b) >= 0.25 for a, b in zip(before, after))
    mean_b, mean_a = sum(before) / len(before), sum(after) / len(after)
    summary = (f"mean pass rate {mean_b:.2f} (online estimate) -> {mean_a:.2f} (measured); {moved} items moved by "
               f">= 0.25; learnable {learn_b} -> {learn_a}"
               + (f"; solved (out of the pool) {solved_b} -> {solved_a}" if solved_at is not None else ""))
    return {"step": step, "domain": domain, "items": len(after), "mean_before": round(mean_b, 4),
            "mean_after": round(mean_a, 4), "moved": moved, "learnable_before": learn_b, "learnable_after": learn_a,
            "solved_before": solved_b, "solved_after": solved_a, "summary": summary}
