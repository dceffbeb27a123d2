"""The GRPO loop on DeepSpeed: rollouts, per-domain rewards, group advantages, KL-constrained update.

One step (per process):

1. draw ``prompts_per_step`` prompts from the domain mixture (a pure function of seed and step);
2. sample ``num_generations`` completions per prompt (formatted by :mod:`generation.prompts`, as
   sweeps format them) from the rollout engine (:mod:`training.rollout_engine`: the KV-cache decode
   loop on the policy or its ``rollout_dtype`` copy, or a colocated vLLM engine; ``rollout.backend``),
   after syncing the policy's current weights into it (``sync_s``), each completion with its own
   seed derived from (run seed, step, the prompt's place in the step, sample index);
3. score each completion with its own domain, one batch per domain (:class:`training.rewards.RewardComposer`);
4. group-relative advantages; groups whose rewards are all equal (advantage 0) are counted
   (``zero_var_frac``) and, by default (``skip_zero_variance_groups``), left out of the
   forward/backward pass, the loss normaliser and the KL term: DAPO's dynamic sampling, without the
   refill. With the option off every group stays in, which is TRL's exact definition. Which to
   choose and why: :mod:`training.losses`, "Zero-variance groups";
5. for ``num_iterations`` passes: policy log-probs (one forward, logits only for completion
   tokens), reference log-probs (frozen copy, ``inference_mode``), both at the sampling
   temperature (``softmax(logits / temperature)``, as TRL), the clipped surrogate + ``beta`` * k3
   KL (:mod:`training.losses`), the policy-gradient term weighted by the rollout/training
   importance correction when it is on (``rollout.importance_sampling``; by default with vLLM:
   :func:`training.losses.rollout_correction`), ``engine.backward`` / ``engine.step`` per micro-batch.

Micro-batch losses are normalised by the whole step's sequence/token counts (all processes), so
gradient accumulation and data parallelism reproduce the full-batch loss exactly.

Devices: the recipe's ``device`` (:mod:`generation.device`) picks the CPU or this rank's GPU; every
tensor of a step is made on the engine's device, and the reference model and rollout copy live
there in their own precision. Ranks under ZeRO-3 (parameters sharded, gathered by collectives in
every forward and backward) stay in step two ways: rollouts sample from a full copy of the policy,
loaded from the shards before each step, so decode loops that stop at different steps make no
collectives; and a rank with nothing for a micro-batch runs it on one padding row whose loss
counts zero, so its forwards and backwards pair with the others'.

Code layout: :meth:`GRPOTrainer.train` loads the rows (they name the run), then ``_setup`` builds a
:class:`TrainingSession` (process group, mixture, reward composer, DeepSpeed engine with the
rollout and reference models, autocast, MLflow run), ``_run_steps`` runs the loop (``_step`` per
step, saving on schedule), and the MLflow run is finished however the loop ended. A step's update
splits the kept rollouts into :class:`MicroBatch` es, prepared once per step and reused by every
iteration.

Run identity: a run is its config and the rows it trains on. The default run name is
``<recipe>-<config fingerprint>-<data fingerprint>`` (:func:`run_name_for`; the data fingerprint
covers the ids and exact content of every domain's loaded train rows, order-independent:
:func:`training.data.rows_fingerprint`). So after new gated data arrives the same recipe trains a
new run, and the same config on the same rows resumes (or returns) the earlier one. An explicit
``run_name`` whose state was made with other rows (or another config) is refused. The data
fingerprint is kept in the run state, logged to MLflow (tag ``assay.data_fingerprint``, params
``data.<domain>.*``) and stamped on every checkpoint (lake row, LoggedModel and model version tags).

Run state lives in ``$ASSAY_HOME/runs/<run name>/``: ``state.json`` (MLflow run id, finished steps,
history, checkpoints, data fingerprints) and the DeepSpeed checkpoint of the last save (model,
optimizer, scheduler). Starting the same run again resumes after the last saved step; a finished
run returns its result.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from storage.errors import UserError
from storage.lake import Lake
from training.config import GRPOConfig
from training.data import combined_fingerprint
from training.history import (ALL, HACKING_SIGNALS, HISTORY_TABLE, LEARNED_SIGNALS, METRICS,  # noqa: F401
                              REWARD_HACKING, STEP_EXTRAS, mlflow_metrics, policy_tokens, step_rows,
                              write_history)
from training.learnability import load_item_pass_rates, uses_pass_rates
from training.validation import VALIDATION_FILE, progress_of, summary_of

if TYPE_CHECKING:  # annotations only: these modules are imported when training starts
    from storage.tracking import Tracker
    from training.data import TrainingData
    from training.mixture import DomainMixture
    from training.rewards import RewardComposer
    from training.validation import Validation

# how the MLflow run ends when a stop (reward_hacking: stop, validation.forgetting: stop) ended it (not
# FINISHED: it did not run its steps); tag assay.stopped says why, assay.stop_reason in words
STOPPED_STATUS = "KILLED"


# what can stop a run (TrainResult.stopped["reason"]): its words in the log and the recipe setting that decides
STOP_WORDS = {"reward_hacking": "reward hacking", "forgetting": "forgetting"}
STOP_SETTINGS = {"reward_hacking": "reward_hacking", "forgetting": "validation.forgetting"}


class RunSetupError(UserError, ValueError):
    """The run asked for cannot start as configured: its name exists with another config or other
    rows, or its domains cannot train together; the message says what to change."""


@dataclass
class TrainResult:
    run_name: str
    mlflow_run_id: str
    checkpoint: str
    checkpoint_path: str
    history: list[dict]
    steps_done: int
    resumed_from: int
    data_sources: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    data_fingerprint: str = ""
    data: dict[str, dict] = field(default_factory=dict)  # domain -> rows, source, fingerprint(, evaluation)
    # why the run ended before max_steps, when a stop ended it (reward_hacking: stop, validation.forgetting:
    # stop): {"reason": "reward_hacking" | "forgetting", "reasons", "step", "domains", "evidence": {domain:
    # training.overoptimisation.Verdict.evidence() | training.forgetting.DomainValidation.evidence()}}; else None
    stopped: dict | None = None
    # the latest in-loop validation and the forgetting flags (training.validation.summary_of); {} without
    validation: dict = field(default_factory=dict)

    def summary(self) -> dict:
        return {"checkpoint": self.checkpoint, "mlflow_run_id": self.mlflow_run_id, "stopped": self.stopped,
                "validation": self.validation,  # the in-loop validation apart: history holds the trained steps
                "history": [{k: h[k] for k in ("step", "domain", "reward_mean", "kl", "loss")}
                            for h in self.history if h["domain"] != ALL and h.get("reward_mean") is not None]}


# -- small pure helpers ----------------------------------------------------------------------------


def run_name_for(config: GRPOConfig, data_fingerprint: str) -> str:
    """The run's name: the explicit ``run_name``, else recipe + config and data fingerprints."""
    return config.run_name or f"{config.resolved_run_name()}-{data_fingerprint[:8]}"


def _split(items: list, parts: int) -> list[list]:
    size, extra = divmod(len(items), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return out


@dataclass
class Rollout:
    domain: str
    row: dict
    prompt_ids: list[int]
    completion_ids: list[int]
    text: str
    finish_reason: str
    rollout_logprobs: list[float] | None = None  # the sampler's log-prob of each completion token
    # multi-turn episodes (training.trajectories): 1.0 on the policy's own tokens, 0.0 on tool and
    # template tokens (they stay in the forward, out of the loss); None: every token is the policy's
    policy_mask: list[float] | None = None
    judged_score: float | None = None  # an episode's verdict (hidden tests, on the host): not re-scored
    reward: float = 0.0
    score: float = 0.0
    learned: float | None = None  # the domain's learned reward (sigmoid of its reward model), if it has one
    advantage: float = 0.0
    group: int = 0
    # filled by the update
    loss: float | None = None
    kl: float | None = None
    entropy: float | None = None
    clip_frac: float | None = None


@dataclass
class MicroBatch:
    """One micro-batch of a step's update, prepared once and used by every ``num_iterations`` pass."""

    rollouts: list[Rollout]
    ids: Any                # [rows, prompt + completion columns] (see build_batch)
    attention: Any          # 1 on real tokens, 0 on padding
    positions: Any          # position ids that skip the left padding
    loss_mask: Any          # [rows, width] float: 1 where a completion token enters the loss
    width: int              # completion columns (the last ``width`` columns of ``ids``)
    ref_logp: Any | None    # [rows, width] under the frozen reference; None when beta == 0
    old_logp: Any | None    # [rows, width] under the policy before this step; None with one iteration
    advantages: Any         # [rows] float32, one per rollout
    rollout_logp: Any | None = None  # [rows, width] the sampler's log-probs; None without the IS correction


@dataclass
class TrainingSession:
    """What one training process holds from setup to finish (built by ``GRPOTrainer._setup``)."""

    data: TrainingData      # every domain's train rows, their sources and fingerprints
    state: dict             # the run state (state.json): finished steps, history, checkpoints
    start_step: int         # the first step this process runs: 0, or the step it resumes after
    mixture: DomainMixture
    composer: RewardComposer
    engine: Any             # the DeepSpeed engine around the policy
    rollout_model: Any      # the rollout engine (training.rollout_engine): torch decode loop or vLLM
    ref_model: Any | None   # the frozen reference; None when beta == 0
    autocast: Callable      # the context the forward passes run in (bf16 autocast or none)
    tracker: Tracker | None  # the MLflow run, on rank 0 only
    started: float          # time.perf_counter() when train() began (time budget, result seconds)
    validation: Validation | None = None  # in-loop validation (training.validation); None when off


def build_batch(rollouts: list[Rollout], pad_id: int, mask_truncated: bool, device=None):
    """Left-padded prompts | right-padded completions, so every completion starts at one column.

    The rows are laid out in Python and each tensor is made once, on ``device`` (the engine's: the
    model and every tensor of a step live there), so a GPU step costs one copy per tensor rather
    than one per row. ``device`` None is torch's default device (the CPU)."""
    import torch

    width_p = max(len(r.prompt_ids) for r in rollouts)
    width_c = max(len(r.completion_ids) for r in rollouts)
    ids, attn, loss_mask = [], [], []
    for r in rollouts:
        p_pad, c_pad = width_p - len(r.prompt_ids), width_c - len(r.completion_ids)
        ids.append([pad_id] * p_pad + list(r.prompt_ids) + list(r.completion_ids) + [pad_id] * c_pad)
        attn.append([0] * p_pad + [1] * (len(r.prompt_ids) + len(r.completion_ids)) + [0] * c_pad)
        counted = 0.0 if mask_truncated and r.finish_reason == "length" else 1.0
        own = r.policy_mask if r.policy_mask is not None else [1.0] * len(r.completion_ids)
        loss_mask.append([counted * m for m in own] + [0.0] * c_pad)
    ids = torch.tensor(ids, dtype=torch.long, device=device)
    attn = torch.tensor(attn, dtype=torch.long, device=device)
    loss_mask = torch.tensor(loss_mask, dtype=torch.float32, device=device)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    return ids, attn, positions, loss_mask, width_c


def completion_logprobs(model, ids, attn, positions, width_c: int, *, autocast, temperature: float,
                        with_entropy: bool = False):
    """Log-probs of the completion tokens (and their entropies) under ``softmax(logits / temperature)``:
    the distribution the rollouts were sampled from (top-k / top-p truncation aside, as in TRL's
    ``logits / self.temperature``). At temperature != 1 the raw logits would describe another
    policy than the one that sampled, so ratios, the KL and the entropy would all be off.
    Logits are computed only for the completion columns."""
    import torch

    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 to compute log-probs, got {temperature!r}")
    with autocast():
        out = model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=False,
                    logits_to_keep=width_c + 1)
    logits = out.logits[:, :-1].float() / temperature
    targets = ids[:, -width_c:]
    logp_all = logits.log_softmax(-1)
    logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


# -- the trainer ---------------------------------------------------------------------------------


class GRPOTrainer:
    """One GRPO run: ``train()`` trains it, resumes it, or returns its finished result."""

    def __init__(self, config: GRPOConfig, lake: Lake, tracking_uri: str, *, artifact_root: str | None = None,
                 allow_generate: bool = False, registry=None, progress: bool = True,
                 log: Callable[[str], None] = print, stop_after: int | None = None,
                 time_budget_s: float | None = None):
        self.config = config
        self.lake = lake
        self.tracking_uri = tracking_uri
        self.artifact_root = artifact_root or str(lake.mlflow_artifacts)
        self.allow_generate = allow_generate
        self.registry = registry
        self.progress = progress
        self.log = log
        self.stop_after = stop_after  # for tests: end the process-local loop early, as a kill would
        self.time_budget_s = time_budget_s  # stop (with a checkpoint) after the step that crosses it
        self.run_name = self.run_dir = self.ds_dir = None  # known once the rows are loaded (train)
        self.plan = None    # where this process trains (generation.device), known when train() starts
        self.device = None  # the engine's torch.device, known once the engine is built
        self.data_fingerprint = ""
        # per step (reset by _step): seconds of sync / reference forward / update, and the
        # rollout/training importance corrections of the step's micro-batches
        self._timings: dict[str, float] | None = None
        self._corrections: list = []
        self._rollout_name = "torch"
        self.pass_rates = None  # training.learnability.ItemPassRates, with learnability sampling
        self._domains: dict = {}  # name -> domains.Domain of the run (set up by _setup)
        self._learned_domains: list[str] = []  # those rewarded by a learned reward: watched for over-optimisation
        self._flagged: set[str] = set()  # domains the watch fired on at the last step judged (warn once per firing)

    def _stop_mode(self, reason: str) -> str:
        return self.config.reward_hacking if reason == "reward_hacking" else self.config.validation.forgetting

    def _bind_run(self, data_fingerprint: str) -> None:
        self.data_fingerprint = data_fingerprint
        self.run_name = run_name_for(self.config, data_fingerprint)
        self.run_dir = self.lake.home / "runs" / self.run_name
        self.ds_dir = self.run_dir / "deepspeed"

    # -- run state -------------------------------------------------------------------------------

    def _state_path(self) -> Path:
        return self.run_dir / "state.json"

    def load_state(self) -> dict:
        path = self._state_path()
        if not path.exists():
            return {"run_id": None, "step": 0, "history": [], "checkpoints": [],
                    "fingerprint": self.config.fingerprint(), "data_fingerprint": self.data_fingerprint}
        state = json.loads(path.read_text())
        if state.get("fingerprint") != self.config.fingerprint():
            raise RunSetupError(
                f"run {self.run_name!r} exists with a different config (in {self.run_dir}): choose "
                "another run name (--run-name, or run_name in the recipe), leave it unset (the default name "
                "follows the config), or delete that folder to start over"
            )
        known = state.setdefault("data_fingerprint", self.data_fingerprint)  # runs from before it was kept
        if known != self.data_fingerprint:
            raise RunSetupError(
                f"run {self.run_name!r} exists and trained on other rows (data fingerprint {known}, now "
                f"{self.data_fingerprint}; in {self.run_dir}): choose another run_name (or leave it unset: "
                "the default name follows the data) or delete that folder to start over"
            )
        return state

    def _save_state(self, state: dict) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        tmp = self._state_path().with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1, default=str))
        os.replace(tmp, self._state_path())

    # -- main ------------------------------------------------------------------------------------

    def train(self) -> TrainResult:
        """Load the rows (they name the run), set up, run the steps, finish the MLflow run."""
        from domains import get_registry
        from training.engine import check_device, precision_for_device

        started = time.perf_counter()
        self.plan = check_device(self.config)  # a device or precision this machine lacks fails before any work
        self.config, note = precision_for_device(self.config, self.plan)  # bf16 on a CPU that emulates it: fp32
        if note:
            self.log(note)
        registry = self.registry or get_registry()
        _check_prompt_room(self.config, registry)
        data = self._load_rows(registry)
        state = self.load_state()
        stopped = state.get("stopped")
        if stopped:
            reasons = stopped.get("reasons") or [stopped["reason"]]
            still = [r for r in reasons if self._stop_mode(r) == "stop"]
            why = (f"run {self.run_name} was stopped after step {stopped['step']} for "
                   f"{' and '.join(STOP_WORDS[r] for r in reasons)} ({', '.join(stopped['domains'])})")
            if still:
                self.log(f"{why}: nothing to do; to train on regardless, set "
                         + " and ".join(f"`{STOP_SETTINGS[r]}: warn`" for r in still) + " in the recipe")
                return self._result(state, resumed_from=state["step"], sources=state.get("sources", {}), seconds=0.0)
            self.log(f"{why}; continuing it under " + " and ".join(f"{STOP_SETTINGS[r]}: {self._stop_mode(r)}"
                                                                    for r in reasons))
            state.setdefault("stops", []).append(state.pop("stopped"))
        if state["step"] >= self.config.max_steps and state["checkpoints"]:
            self.log(f"run {self.run_name} already finished {state['step']} steps on these rows "
                     f"(data {self.data_fingerprint}): nothing to do")
            return self._result(state, resumed_from=state["step"], sources=state.get("sources", {}),
                                seconds=0.0)
        session = self._setup(registry, data, state, started)
        status = "FAILED"
        try:
            status = self._run_steps(session)
        finally:
            session.rollout_model.close()  # a vLLM engine frees its KV cache here
            if session.tracker is not None:
                session.tracker.finish(status)
        return self._result(session.state, session.start_step, data.sources, time.perf_counter() - started)

    # -- setup -----------------------------------------------------------------------------------

    def _load_rows(self, registry):
        """Every domain's train rows. They decide the run's identity, so they are loaded (and
        refused) before anything else, and the run is bound to their fingerprint."""
        from training.data import load_training_data

        cfg = self.config
        data = load_training_data(cfg.domains, self.lake, registry=registry, allow_generate=self.allow_generate,
                                  generate_n=cfg.train_samples_per_domain, seed=cfg.seed)
        fingerprint = data.fingerprint()
        self.pass_rates = None
        if uses_pass_rates(cfg):  # the weights rows are drawn with are part of what the run trains on
            from generation.policy import policy_path
            from generation.prompts import prompt_format_of_folder

            fmt = prompt_format_of_folder(policy_path(cfg.policy, self.lake.home))
            self.pass_rates = load_item_pass_rates(self.lake, cfg, data.rows, fmt)
            fingerprint = combined_fingerprint({"rows": fingerprint, "pass_rates": self.pass_rates.fingerprint()})
        self._bind_run(fingerprint)
        return data

    def _setup(self, registry, data: TrainingData, state: dict, started: float) -> TrainingSession:
        """The process group, the mixture and reward composer, the models, then the MLflow run."""
        from training.engine import setup_distributed
        from training.mixture import DomainMixture
        from generation.policy import policy_path
        from training.learned_rewards import LearnedRewardScorer
        from training.rewards import RewardComposer
        from training.validation import Validation

        cfg = self.config
        # Build/convert the base model before the process group exists: transformers writes model
        # files only on rank 0 of an initialised group, which would leave another rank's build empty.
        policy_path(cfg.policy, self.lake.home)
        self.rank, self.world = setup_distributed(cfg.device)
        if self._broadcast(self.data_fingerprint) != self.data_fingerprint:
            raise RuntimeError(f"the train rows changed while the ranks loaded them (run {self.run_name}): "
                               "start the run again")
        if self.rank == 0:
            self._log_rows(data)
        tracker = self.pass_rates.tracker(data.rows, cfg.mixture) if self.pass_rates is not None else None
        if self.pass_rates is not None and self.rank == 0:
            self.log(f"learnability sampling ({cfg.mixture.pass_rate_updates} pass rates), starting from those "
                     f"of {self.pass_rates.checkpoint} (K={self.pass_rates.samples}): "
                     f"{self.pass_rates.describe(data.rows)}")
        mixture = DomainMixture(data.rows, cfg.mixture, cfg.seed, pass_rates=tracker)
        mixture.load_state_dict(state.get("sampler"))  # a resumed run draws on from the saved estimates
        if self.rank == 0:
            self.log("domain mixture: " + ", ".join(f"{d} {p:.2f}" for d, p in mixture.probabilities.items()))
        self._domains = {d: registry.get(d) for d in cfg.domains}
        episodes = sorted(d for d, domain in self._domains.items() if getattr(domain, "episode_task", None))
        if episodes and len(episodes) < len(self._domains):  # a step's groups are all episodes or none
            raise RunSetupError(f"terminal-agent domains ({', '.join(episodes)}) and single-turn domains "
                             f"({', '.join(sorted(set(self._domains) - set(episodes)))}) cannot train in one run: "
                             "train them in separate runs")
        learned_episodes = sorted(d for d in episodes if getattr(self._domains[d], "learned_reward", None))
        if learned_episodes:
            raise RunSetupError(f"terminal-agent domains {', '.join(learned_episodes)} declare a learned reward: episodes "
                             "are rewarded by their hidden tests only; remove learned_reward to train on them")
        learned = {name: LearnedRewardScorer.from_gated(gated) for name, gated in data.reward_models.items()}
        self._learned_domains = sorted(learned)
        if learned and self.rank == 0:
            self.log("learned rewards: " + ", ".join(f"{name} by reward model {g['reward_model']} (gate check "
                                                     f"{g['gate_check']} passed, weight {g['weight']})"
                                                     for name, g in data.reward_models.items()))
            blind = [name for name in learned if not self._domains[name].has_verifier]
            if len(blind) < len(learned):
                gold = ("the held-out validation once enough validations exist, the verifier on the same rollouts "
                        "until then" if cfg.validation.every(cfg.max_steps) else "the verifier on the same rollouts")
                self.log(f"reward-hacking watch ({cfg.reward_hacking}): a learned reward rising while its gold signal "
                         f"({gold}) falls by >= {cfg.reward_hacking_min_change:g} over {cfg.reward_hacking_window} steps is "
                         f"flagged" + (" and ends the run" if cfg.reward_hacking == "stop" else "")
                         + ("" if cfg.max_steps >= cfg.reward_hacking_window else
                            f"; this run has {cfg.max_steps} steps, fewer than the window: no verdict"))
            if blind:
                self.log(f"no verifier, so no gold signal and no accuracy for: {', '.join(blind)} (the reward-hacking "
                         "watch cannot judge them; their learned reward is their only measure)")
        composer = RewardComposer(cfg, self._domains, learned)  # a reward model loads on its first batch
        quiet = self.log if self.rank == 0 else (lambda message: None)
        validation = Validation.plan(cfg, registry, self._domains, state, log=quiet, train_rows=data.rows)
        if validation is not None:
            quiet(validation.describe())
        start_step = int(state["step"])
        engine, rollout_model, ref_model = self._models(start_step)
        self._rollout_name = rollout_model.name  # what rollout.backend resolved to (auto: here)
        autocast = self._autocast()
        tracker = self._start_tracking(data, state)  # last: nothing may fail between it and the loop
        return TrainingSession(data=data, state=state, start_step=start_step, mixture=mixture, composer=composer,
                               engine=engine, rollout_model=rollout_model, ref_model=ref_model,
                               autocast=autocast, tracker=tracker, started=started, validation=validation)

    def _log_rows(self, data: TrainingData) -> None:
        for name, info in data.manifest().items():
            if info["source"] == "generated":
                self.log(f"domain {name}: no train_set in the lake; generated {info['rows']} "
                         f"train samples directly from the domain (seed {self.config.seed})")
            else:
                self.log(f"domain {name}: {info['rows']} train rows from train_set (gate evaluation "
                         f"{info.get('evaluation')}), fingerprint {info['fingerprint']}")

    def _models(self, start_step: int):
        """``(engine, rollout model, reference model)``: the policy in its DeepSpeed engine (with the
        optimizer and scheduler of ``start_step`` restored when resuming), the model rollouts sample
        from, and the frozen reference (None when ``beta`` is 0).

        The policy is loaded on the CPU and DeepSpeed moves it to its device; the reference is
        copied from it before DeepSpeed sees it (under ZeRO-3 its parameters are sharded from then
        on) and moved to the engine's device in its own precision; the rollout copy is made there."""
        import copy

        import torch

        from training.engine import build_engine, engine_device
        from training.rollout_engine import cast_model
        from generation.policy import load_policy

        cfg = self.config
        torch.manual_seed(cfg.seed)
        model, tokenizer = load_policy(cfg.policy, dtype="float32", home=self.lake.home, rope_scaling=cfg.rope_scaling)
        self.tokenizer = tokenizer
        low_precision = cfg.deepspeed.precision == "bf16" or cfg.deepspeed.autocast_bf16
        ref_model = None
        if cfg.beta != 0.0:
            ref_model = cast_model(copy.deepcopy(model), torch.bfloat16 if low_precision else torch.float32)
            ref_model.eval().requires_grad_(False)
        if cfg.deepspeed.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
        engine = build_engine(model, cfg, self.world)
        self.engine = engine
        self.device = engine_device(engine)
        if self.plan is not None and self.device.type != self.plan.device_type:
            raise RuntimeError(f"DeepSpeed placed the policy on {self.device}, but this run was planned for "
                               f"{self.plan.device} (recipe device {cfg.device!r})")
        if ref_model is not None:
            ref_model.to(self.device)
        if start_step > 0:
            self._restore(engine, start_step)
        return engine, self._rollout_model(engine), ref_model

    def _restore(self, engine, step: int) -> None:
        """Weights, optimizer and scheduler as the DeepSpeed checkpoint of ``step`` left them."""
        tag = f"step{step:06d}"
        loaded, _ = engine.load_checkpoint(str(self.ds_dir), tag=tag, load_optimizer_states=True,
                                           load_lr_scheduler_states=True)
        if loaded is None:
            raise RuntimeError(f"cannot resume {self.run_name}: DeepSpeed checkpoint {tag} missing in {self.ds_dir}")
        if self.rank == 0:
            self.log(f"resuming run {self.run_name} after step {step} (optimizer state restored)")

    def _autocast(self) -> Callable:
        """The context the forward passes run in: bf16 autocast when the recipe asks for it."""
        import torch

        if not self.config.deepspeed.autocast_bf16:
            return contextlib.nullcontext
        device_type = self.device.type  # the engine's: autocast on "cpu" leaves CUDA matmuls in fp32
        return lambda: torch.autocast(device_type, dtype=torch.bfloat16)

    def _start_tracking(self, data: TrainingData, state: dict):
        """Start (or resume) the MLflow run on rank 0, with the config and the rows' manifest as
        params; every rank learns its id. Returns the tracker (None on other ranks)."""
        cfg = self.config
        tracker = None
        if self.rank == 0:
            from storage.tracking import Tracker

            tracker = Tracker(self.tracking_uri, self.artifact_root)
            params = cfg.flat_params() | {"run_name": self.run_name, "data_fingerprint": self.data_fingerprint,
                                          "rollout.engine": self._rollout_name,
                                          "device.resolved": str(self.device)}  # e.g. cuda:0 for device auto
            for name, info in data.manifest().items():
                params.update({f"data.{name}.{key}": str(value) for key, value in info.items()})
            run_id = tracker.start(self.run_name, params,
                                   tags={"assay.recipe": cfg.recipe, "assay.domains": ",".join(cfg.domains),
                                         "assay.policy": cfg.policy, "assay.data_fingerprint": self.data_fingerprint},
                                   resume_run_id=state.get("run_id"))
            state["run_id"] = run_id
            state["sources"] = data.sources
            state["data"] = data.manifest()
        state["run_id"] = self._broadcast(state.get("run_id"))
        self._run_id = state["run_id"]
        return tracker

    # -- the loop --------------------------------------------------------------------------------

    def _run_steps(self, session: TrainingSession) -> str:
        """Steps from ``start_step`` to ``max_steps``, saving on schedule and after the last one.
        Returns how the MLflow run ends: FINISHED, or KILLED when ``stop_after`` cut the loop
        short as a kill would (no save), or :data:`STOPPED_STATUS` when ``reward_hacking: stop`` ended
        it after the step the watch fired on (saved, with the reason in the run state and MLflow)."""
        cfg = self.config
        bar = self._progress_bar(session.start_step)
        try:
            self._validation_start(session)
            for step in range(session.start_step, cfg.max_steps):
                if self.stop_after is not None and step - session.start_step >= self.stop_after:
                    return "KILLED"
                rows = self._step(step, session)
                out_of_time = self._out_of_time(session.started)
                validated = self._validate(step + 1, rows, session, last=out_of_time)
                fired = self._watch(step, rows, session)
                self._record_step(step, rows, session, bar)
                reasons = [reason for reason, hit in (
                    ("reward_hacking", bool(self._broadcast(bool(fired) and cfg.reward_hacking == "stop"))),
                    ("forgetting", validated is not None and validated.stop)) if hit]  # rank 0 decided both
                if reasons:
                    session.state["stopped"] = self._stop_record(step + 1, reasons, fired, validated, session)
                stop = bool(reasons)
                if (step + 1 == cfg.max_steps or out_of_time or stop
                        or (cfg.save_steps and (step + 1) % cfg.save_steps == 0)):
                    session.state["sampler"] = session.mixture.state_dict()  # saved with the checkpoint
                    self._save(step + 1, session.engine, session.state)
                if stop:
                    if self.rank == 0:
                        look = {"reward_hacking": "the learned reward against the verifier",
                                "forgetting": "the validation curves"}
                        self.log(f"stopped after step {step + 1} ("
                                 + ", ".join(f"{STOP_SETTINGS[r]}: stop" for r in reasons)
                                 + "): the checkpoint of this step is saved; look at "
                                 + " and ".join(look[r] for r in reasons) + " on the training page before using it; "
                                 "to train on regardless, set " + " and ".join(f"`{STOP_SETTINGS[r]}: warn`" for r in reasons)
                                 + " and rerun")
                    return STOPPED_STATUS
                if out_of_time:
                    if self.rank == 0:
                        self.log(f"time budget of {self.time_budget_s:.0f} s used: stopped after step {step + 1}")
                    break
            return "FINISHED"
        finally:
            if bar is not None:
                bar.close()

    def _validation_start(self, session: TrainingSession) -> None:
        """The step-0 validation of a new run (training.validation): the start every later one is
        tested against, into the history (step-0 rows), MLflow and the run state."""
        validation = session.validation
        if validation is None or not self._broadcast(validation.needs_start()):
            return
        session.rollout_model.sync(session.engine)  # every rank: a collective under ZeRO-3
        if self.rank != 0:
            return
        rows = validation.start(self._validation_engine(session), session.state.get("run_id"))
        session.state["history"].extend(rows)
        if session.tracker is not None:
            session.tracker.log_metrics(0, mlflow_metrics(rows))

    def _validate(self, step: int, rows: list[dict], session: TrainingSession, *, last: bool = False):
        """The in-loop validation after ``step`` when it is due (or ``last``: the run ends here): run on
        rank 0 through the rollout engine, after syncing the policy's current weights into it; its
        :class:`training.validation.Round` (flags, boosts, re-measured pass rates, a stop) applied on
        every rank. Returns the round, or None when none ran."""
        validation = session.validation
        if validation is None:
            return None
        round_ = None
        if self.rank == 0:
            validation.account(rows)  # the step's seconds into the budget (validation.max_share)
        if (validation.due(step) or last) and self._broadcast(self.rank != 0 or validation.within_budget(step, last)):
            session.rollout_model.sync(session.engine)  # it held the weights from before this step's update
            if self.rank == 0:
                round_ = validation.run(step, self._validation_engine(session), rows, mixture=session.mixture,
                                        tracker=session.tracker, run_id=session.state.get("run_id"))
            round_ = self._broadcast(round_)
            validation.apply(round_, session.mixture)
        return round_

    def _validation_engine(self, session: TrainingSession):
        from generation.item_scoring import TokenEngine

        return TokenEngine(session.rollout_model, self.tokenizer)

    def _watch(self, step: int, rows: list[dict], session: TrainingSession) -> list:
        """The proxy over-optimisation watch (:mod:`training.overoptimisation`) of every domain with a
        learned reward, on the run's history through this step: marks each of ``rows`` (column
        ``reward_hacking``: 1.0 fired, 0.0 judged and did not, None no verdict yet) and, on rank 0,
        flags a firing in MLflow (tags ``assay.reward_hacking``, ``assay.reward_hacking.<domain>`` with
        the evidence; the metric follows from the row) and the log. Returns the verdicts that fired."""
        from training.overoptimisation import watch

        cfg = self.config
        history = [*session.state["history"], *rows]
        fired = []
        for row in rows:
            if row["domain"] == ALL or row["domain"] not in self._learned_domains:
                continue
            validated = session.validation is not None and row["domain"] in session.validation.domains
            verdict = watch(history, row["domain"], window=cfg.reward_hacking_window,
                            min_change=cfg.reward_hacking_min_change,
                            eval_every=session.validation.every if validated else None)
            row[REWARD_HACKING] = None if verdict is None else float(verdict.fired)
            sources = session.state.setdefault("reward_hacking_gold", {})
            if verdict is not None and sources.get(verdict.domain) != verdict.gold_source:
                sources[verdict.domain] = verdict.gold_source  # said once, when the watch starts or switches
                if self.rank == 0:
                    self.log(f"reward-hacking watch of {verdict.domain}: judged against the {verdict.gold_source} "
                             f"from step {step + 1} on (its gold signal)")
            if verdict is None or not verdict.fired:
                self._flagged.discard(row["domain"])
                continue
            fired.append(verdict)
            if self.rank != 0:
                continue
            if session.tracker is not None:
                flagged = sorted({*session.state.get("reward_hacking_flagged", []), verdict.domain})
                session.state["reward_hacking_flagged"] = flagged
                session.tracker.set_tags({"assay.reward_hacking": ",".join(flagged),
                                          f"assay.reward_hacking.{verdict.domain}": json.dumps(verdict.evidence())})
            if verdict.domain not in self._flagged:
                self.log(f"WARNING: reward hacking suspected at step {step + 1}: {verdict.describe()}"
                         + (" -- stopping the run (reward_hacking: stop)" if cfg.reward_hacking == "stop" else
                            " -- training on (reward_hacking: warn)"))
            self._flagged.add(verdict.domain)
        return fired

    def _stop_record(self, step: int, reasons: list[str], fired: list, validated, session: TrainingSession) -> dict:
        """Why the run stops (kept in the run state, tagged on the MLflow run): the reward-hacking
        verdicts that fired and/or the validated domains flagged for forgetting."""
        found = ([(v.domain, v.evidence(), v.describe()) for v in fired] if "reward_hacking" in reasons else [])
        if "forgetting" in reasons:
            found += [(r.domain, r.evidence(), f"forgetting: {r.describe()}") for r in validated.flagged]
        record = {"reason": reasons[0], "reasons": reasons, "step": step, "domains": sorted({d for d, _, _ in found}),
                  "evidence": {d: evidence for d, evidence, _ in found}}
        if session.tracker is not None:
            session.tracker.set_tags({"assay.stopped": ",".join(reasons), "assay.stopped_step": str(step),
                                      "assay.stop_reason": "; ".join(text for _, _, text in found)[:4000]})
        return record

    def _record_step(self, step: int, rows: list[dict], session: TrainingSession, bar) -> None:
        """A finished step's history rows: into the run state, MLflow and the progress bar."""
        session.state["history"].extend(rows)
        session.state["step"] = step + 1
        if session.tracker is not None:
            metrics = mlflow_metrics(rows)
            if session.mixture.tracker is not None:  # where the pass-rate estimates stand (learnability)
                for domain, summary in session.mixture.tracker.summary().items():
                    metrics.update({f"{name}/{domain}": value for name, value in summary.items()})
            session.tracker.log_metrics(step + 1, metrics)
        if bar is not None:
            overall = next(r for r in rows if r["domain"] == ALL)
            postfix = {"reward": f"{overall['reward_mean']:.3f}", "tok_s": f"{overall['tokens_per_s']:.1f}"}
            if session.validation is not None:  # the latest validation, per domain: score (change since step 0)
                postfix["val"] = progress_of(session.state)
            bar.set_postfix(postfix)
            bar.update(1)

    def _progress_bar(self, start_step: int):
        if self.rank != 0 or not self.progress:
            return None
        from tqdm import tqdm

        return tqdm(total=self.config.max_steps, initial=start_step, desc=self.run_name, unit="step",
                    dynamic_ncols=True)

    # -- pieces ----------------------------------------------------------------------------------

    def _out_of_time(self, started: float) -> bool:
        if self.time_budget_s is None:
            return False
        return bool(self._broadcast(time.perf_counter() - started >= self.time_budget_s))  # ranks agree

    def _broadcast(self, value):
        import torch.distributed as dist

        if self.world == 1:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def _all_sum(self, values: list[float]) -> list[float]:
        import torch
        import torch.distributed as dist

        if self.world == 1:
            return values
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)  # NCCL reduces GPU tensors only
        dist.all_reduce(tensor)
        return tensor.tolist()

    def _rollout_model(self, engine):
        """The rollout engine (:mod:`training.rollout_engine`): the torch decode loop on the policy
        or its ``rollout_dtype`` copy, or a colocated vLLM engine, as ``rollout.backend`` says."""
        from generation.policy import policy_path
        from training.rollout_engine import make_rollout_engine

        return make_rollout_engine(self.config, engine, self.tokenizer, world=self.world, device=self.device,
                                   policy_dir=policy_path(self.config.policy, self.lake.home),
                                   home=str(self.lake.home), log=self.log if self.rank == 0 else lambda m: None)

    def _rollouts(self, step: int, picks, rollout_engine) -> tuple[list[Rollout], float]:
        """The step's completions (``num_generations`` per pick) and the seconds they took; the
        rollout engine holds the policy's current weights (``_step`` synced it)."""
        from generation.contract import SamplingParams, derive_seed
        from generation.prompts import prompt_ids as chat_prompt_ids

        cfg = self.config
        tok = self.tokenizer
        if any(self._episode_task(pick) is not None for pick in picks):
            return self._episode_rollouts(step, picks, rollout_engine)
        # formatted and tokenized as the engines do for sweeps; long prompts keep their end
        prompt_ids = [chat_prompt_ids(tok, pick.row["prompt"])[-cfg.max_prompt_length:] for pick in picks]
        params = SamplingParams(max_new_tokens=cfg.max_completion_length, temperature=cfg.temperature,
                                top_p=cfg.top_p, top_k=cfg.top_k, stop=tuple(cfg.stop), n=cfg.num_generations)
        # one seed per completion, from what it is (run seed, step, the prompt's place in the global
        # batch, sample index): the same rollouts whatever the micro-batching or the rank layout
        first = self.rank * cfg.prompts_per_step
        seeds = [[derive_seed("assay.grpo", cfg.seed, step, first + p, j) for j in range(cfg.num_generations)]
                 for p in range(len(picks))]
        with_logprobs = cfg.rollout.correction(rollout_engine.name) != "none"
        begin = time.perf_counter()
        decoded = rollout_engine.generate(prompt_ids, params, seeds, with_logprobs)
        seconds = time.perf_counter() - begin
        rollouts = []
        for group, (pick, per_prompt) in enumerate(zip(picks, decoded)):
            for row in per_prompt:
                rollouts.append(Rollout(pick.domain, pick.row, prompt_ids[group], row.completion_ids,
                                        row.text, row.finish_reason, rollout_logprobs=row.logprobs, group=group))
        return rollouts, seconds

    def _episode_task(self, pick):
        """The terminal task behind a pick (domains with ``episode_task``), else None."""
        domain = self._domains.get(pick.domain)
        episode_task = getattr(domain, "episode_task", None)
        return episode_task(pick.row) if episode_task is not None else None

    def _episode_rollouts(self, step: int, picks, rollout_engine) -> tuple[list[Rollout], float]:
        """Multi-turn GRPO: ``num_generations`` terminal episodes per pick, in token space
        (:mod:`training.trajectories`), the policy's turns capped at ``max_episode_turns``."""
        from generation.contract import SamplingParams, derive_seed
        from training.trajectories import run_trajectories

        cfg = self.config
        tasks = [self._episode_task(pick) for pick in picks]  # all episodes: _setup refuses a mix
        capped = [t if t.spec.max_turns <= cfg.max_episode_turns else
                  dataclasses.replace(t, spec=t.spec.model_copy(update={"max_turns": cfg.max_episode_turns}))
                  for t in tasks]
        first = self.rank * cfg.prompts_per_step
        plan = [(p, j) for p in range(len(picks)) for j in range(cfg.num_generations)]
        params = SamplingParams(max_new_tokens=cfg.max_completion_length, temperature=cfg.temperature,
                                top_p=cfg.top_p, top_k=cfg.top_k, stop=tuple(cfg.stop))
        with_logprobs = cfg.rollout.correction(rollout_engine.name) != "none"
        begin = time.perf_counter()
        trajectories = run_trajectories(rollout_engine, self.tokenizer, [capped[p] for p, _ in plan], params,
                                        [derive_seed("assay.grpo", cfg.seed, step, first + p, j) for p, j in plan],
                                        with_logprobs=with_logprobs, max_tokens=cfg.max_episode_tokens)
        seconds = time.perf_counter() - begin
        return [Rollout(picks[p].domain, picks[p].row, t.prompt_ids, t.completion_ids, t.text, t.finish_reason,
                        rollout_logprobs=t.rollout_logprobs, policy_mask=t.policy_mask,
                        judged_score=t.episode.reward, group=p)
                for (p, _), t in zip(plan, trajectories)], seconds

    def _step(self, step: int, session: TrainingSession) -> list[dict]:
        """One step on this process's share of the step's prompts; returns its history rows."""
        cfg = self.config
        picks = session.mixture.draw(step, cfg.prompts_per_step * self.world)
        mine = picks[self.rank * cfg.prompts_per_step:(self.rank + 1) * cfg.prompts_per_step]
        step_start = time.perf_counter()
        self._rollout_name = session.rollout_model.name
        self._timings = {"sync_s": session.rollout_model.sync(session.engine), "ref_s": 0.0, "update_s": 0.0}
        self._corrections = []
        rollouts, gen_seconds = self._rollouts(step, mine, session.rollout_model)
        texts = [r for r in rollouts if r.judged_score is None]
        scored = session.composer.score_many([r.domain for r in texts], [r.text for r in texts],
                                             [r.row for r in texts], [len(r.completion_ids) for r in texts])
        for r, reward in zip(texts, scored):
            r.reward, r.score = reward.reward, reward.components.get("score")  # None: the domain has no verifier
            r.learned = reward.components.get("learned")
        for r in rollouts:
            if r.judged_score is not None:  # an episode: the hidden tests decided, once, on the host
                reward = session.composer.compose_judged(r.domain, r.text, r.judged_score, int(policy_tokens(r)))
                r.reward, r.score = reward.reward, reward.components["score"]
        self._observe(step, picks, rollouts, session.mixture)
        zero_var, loss_total = self._learn(rollouts, session.engine, session.ref_model, session.autocast)
        seconds = time.perf_counter() - step_start
        return step_rows(step + 1, rollouts, zero_var, seconds, gen_seconds, loss_total,
                         getattr(self, "_run_id", None), self._step_extras())

    def _observe(self, step: int, picks, rollouts: list[Rollout], mixture) -> None:
        """Every group's passes, from every rank, into the mixture's pass-rate estimates: each group is
        ``num_generations`` fresh samples of the current policy on its item (online learnability)."""
        from domains.base import PASS_SCORE

        if mixture.tracker is None:
            return
        cfg = self.config
        passes = [0.0] * len(picks)
        first = self.rank * cfg.prompts_per_step
        for r in rollouts:
            if r.score is not None:  # None: a domain with no verifier, no pass to observe
                passes[first + r.group] += 1.0 if r.score >= PASS_SCORE else 0.0
        passes = self._all_sum(passes)  # each rank filled its own groups: every rank sees all of them
        judged = [i for i, pick in enumerate(picks) if getattr(self._domains[pick.domain], "has_verifier", True)]
        mixture.observe([picks[i] for i in judged], [round(passes[i]) for i in judged], cfg.num_generations)

    def _learn(self, rollouts: list[Rollout], engine, ref_model, autocast) -> tuple[list[bool], float | None]:
        """Advantages, the rows that enter the update and its normalisers, then the update.

        ``rollouts`` are scored and laid out group-major (``num_generations`` per prompt). Returns
        the zero-variance flag per group and the step's loss (None when no row entered the update).
        Which rows enter and what the loss is divided by: :func:`training.losses.update_rows`.
        """
        import torch

        from training.losses import group_advantages, update_rows

        cfg = self.config
        # a few floats that come from Python and go back to it: computed on the CPU, whatever the
        # engine's device (on a GPU they would cost a copy and a sync each way)
        rewards = torch.tensor([r.reward for r in rollouts], dtype=torch.float64, device="cpu")
        stats = group_advantages(rewards, cfg.num_generations, cfg.scale_rewards)
        for r, a in zip(rollouts, stats.advantages.tolist()):
            r.advantage = a
        zero_var = stats.zero_variance.tolist()
        kept = [rollouts[i] for i in update_rows(stats.zero_variance, cfg.num_generations,
                                                  cfg.skip_zero_variance_groups)]
        # the normalisers count the kept rows of the whole step, on every process
        global_seqs, global_tokens = self._all_sum([
            float(len(kept)),
            float(sum(policy_tokens(r) if not (cfg.mask_truncated_completions and r.finish_reason == "length")
                      else 0 for r in kept)),
        ])
        if global_seqs == 0:
            return zero_var, None
        return zero_var, self._update(kept, engine, ref_model, autocast, global_seqs, global_tokens)

    def _update(self, kept: list[Rollout], engine, ref_model, autocast, global_seqs: float, global_tokens: float) -> float:
        """``num_iterations`` passes over the kept rollouts in ``gradient_accumulation_steps``
        micro-batches, one optimizer step each; returns the step's mean loss (this rank's share).

        Every rank runs the same forwards and backwards, whatever it kept: a rank with nothing for
        a micro-batch runs it on one padding row whose loss counts zero. Under ZeRO-3 each forward
        and backward gathers the sharded parameters with collectives the other ranks wait for (and
        under ZeRO-1/2 each backward reduces gradients), so skipping one would hang the step."""
        import torch

        cfg = self.config
        gas = cfg.deepspeed.gradient_accumulation_steps
        began = time.perf_counter()
        batches = [self._micro_batch(chunk, engine, ref_model, autocast) if chunk else
                   self._padding_batch(engine, ref_model, autocast) for chunk in _split(kept, gas)]
        engine.train()
        losses = []
        scale = gas * self.world  # DeepSpeed divides by gas and averages over ranks
        for iteration in range(cfg.num_iterations):
            for batch in batches:
                losses.append(self._micro_step(batch, engine, autocast, iteration, scale, global_seqs, global_tokens))
        total = float(torch.stack(losses).sum()) / cfg.num_iterations  # one device sync per step
        if self._timings is not None:  # policy forward/backward and optimizer steps, the reference's forward apart
            self._timings["update_s"] = time.perf_counter() - began - self._timings["ref_s"]
        return total

    def _padding_batch(self, engine, ref_model, autocast) -> MicroBatch:
        """One row of padding (a one-token prompt and completion) with an all-zero loss mask and
        advantage: its forward and backward make every collective a real micro-batch makes, and
        its loss and gradients are exactly 0. It carries no rollouts, so nothing is recorded."""
        pad = self.tokenizer.pad_token_id
        batch = self._micro_batch([Rollout("", {}, [pad], [pad], "", "stop")], engine, ref_model, autocast)
        batch.loss_mask.zero_()
        batch.rollouts = []
        return batch

    def _micro_batch(self, chunk: list[Rollout], engine, ref_model, autocast) -> MicroBatch:
        """Lay out ``chunk`` on the engine's device and compute what stays fixed across
        iterations: the reference's log-probs and, when the policy is updated more than once, the
        old policy's."""
        import torch

        from training.engine import engine_device

        cfg = self.config
        device = engine_device(engine)
        ids, attention, positions, loss_mask, width = build_batch(chunk, self.tokenizer.pad_token_id,
                                                                  cfg.mask_truncated_completions, device=device)
        ref_logp = None
        if ref_model is not None:
            began = time.perf_counter()
            with torch.inference_mode():
                ref_logp, _ = completion_logprobs(ref_model, ids, attention, positions, width, autocast=autocast,
                                                  temperature=cfg.temperature)
            ref_logp = ref_logp.clone()
            if self._timings is not None:
                self._timings["ref_s"] += time.perf_counter() - began
        old_logp = None
        if cfg.num_iterations > 1:
            with torch.no_grad():
                old_logp, _ = completion_logprobs(engine, ids, attention, positions, width, autocast=autocast,
                                                  temperature=cfg.temperature)
        advantages = torch.tensor([r.advantage for r in chunk], dtype=torch.float32, device=device)
        rollout_logp = None
        if chunk and all(r.rollout_logprobs is not None for r in chunk):  # the sampler's, for the IS correction
            rollout_logp = torch.tensor([list(r.rollout_logprobs) + [0.0] * (width - len(r.rollout_logprobs))
                                         for r in chunk], dtype=torch.float32, device=device)
        return MicroBatch(chunk, ids, attention, positions, loss_mask, width, ref_logp, old_logp, advantages,
                          rollout_logp)

    def _micro_step(self, batch: MicroBatch, engine, autocast, iteration: int, scale: int,
                    global_seqs: float, global_tokens: float):
        """Loss, backward and optimizer step of one micro-batch; returns its loss (a detached
        0-d tensor on the engine's device: reading it here would sync the GPU every micro-batch).
        The first iteration also records each rollout's loss, KL, clip fraction and entropy."""
        from training.losses import grpo_loss, rollout_correction

        cfg = self.config
        logp, entropy = completion_logprobs(engine, batch.ids, batch.attention, batch.positions, batch.width,
                                            autocast=autocast, temperature=cfg.temperature,
                                            with_entropy=iteration == 0)
        # without a reference (beta 0) or an old policy (one iteration), the current log-probs stand in
        old_logp = batch.old_logp if batch.old_logp is not None else logp.detach()
        ref_logp = batch.ref_logp if batch.ref_logp is not None else logp.detach()
        is_weights = None
        if batch.rollout_logp is not None:
            # pi_train before this step's update (old_logp: at one iteration this very forward,
            # detached) against the sampler's pi_rollout, both at the sampling temperature
            correction = rollout_correction(old_logp, batch.rollout_logp, batch.loss_mask,
                                            mode=cfg.rollout.correction(self._rollout_name),
                                            cap=cfg.rollout.importance_sampling_cap)
            is_weights = correction.weights
            if iteration == 0:
                self._corrections.append(correction)
        loss, terms = grpo_loss(logp, old_logp, ref_logp, batch.advantages, batch.loss_mask, loss_type=cfg.loss_type,
                                beta=cfg.beta, epsilon=cfg.epsilon, epsilon_high=cfg.epsilon_high,
                                max_completion_length=cfg.max_completion_length,
                                num_sequences=global_seqs, num_tokens=global_tokens, is_weights=is_weights)
        engine.backward(loss * scale)
        engine.step()
        if iteration == 0 and batch.rollouts:
            self._record_terms(batch.rollouts, terms, batch.loss_mask, entropy)
        return loss.detach()

    def _step_extras(self) -> dict:
        """The step's timings (sync, reference forward, update) and its rollout/training mismatch:
        importance ratios over every micro-batch (min, token-weighted mean, max), the share
        capped or dropped, and the log-prob gap (mean, max). None where it was not measured."""
        extras: dict = {name: None for name in STEP_EXTRAS if name not in ("generation_s", "step_s")}
        extras.update(self._timings or {})
        corrections = [c for c in self._corrections if c.count]
        if corrections:
            count = sum(c.count for c in corrections)
            tokens = sum(c.tokens for c in corrections)
            extras.update({
                "is_ratio_min": min(c.ratio_min for c in corrections),
                "is_ratio_max": max(c.ratio_max for c in corrections),
                "is_ratio_mean": sum(c.ratio_mean * c.count for c in corrections) / count,
                "is_corrected_frac": sum(c.corrected_frac * c.count for c in corrections) / count,
                "logp_gap_max": max(c.logp_gap_max for c in corrections),
                "logp_gap_mean": sum(c.logp_gap_mean * c.tokens for c in corrections) / tokens,
            })
        return extras

    @staticmethod
    def _record_terms(chunk: list[Rollout], terms, mask, entropy) -> None:
        """Per rollout: mean loss, clip fraction, KL and entropy over its counted tokens, read back
        from the device in one copy."""
        import torch

        with torch.no_grad():
            counted = mask.sum(-1)
            tokens = counted.clamp(min=1.0)
            missing = torch.full_like(counted, float("nan"))

            def per_seq(values):
                return missing if values is None else (values.detach().float() * mask).sum(-1) / tokens

            table = torch.stack([counted, per_seq(terms.per_token_loss), per_seq(terms.clipped),
                                 per_seq(terms.per_token_kl), per_seq(entropy)], dim=1).tolist()
        for r, (n, loss, clip, kl, ent) in zip(chunk, table):
            if n == 0:
                continue  # masked out (truncated): it took no part in the loss
            r.loss, r.clip_frac = loss, clip
            r.kl = None if math.isnan(kl) else kl
            r.entropy = None if math.isnan(ent) else ent

    def _save(self, step: int, engine, state: dict) -> None:
        """HF checkpoint (registered), DeepSpeed checkpoint for resume, then the run state."""
        import torch.distributed as dist

        from generation.checkpoints import checkpoint_id, register_checkpoint

        cfg = self.config
        ckpt = checkpoint_id(self.run_name, step)
        folder = self.lake.checkpoints_dir / ckpt
        if cfg.deepspeed.zero_stage == 3:
            state_dict = engine._zero3_consolidated_16bit_state_dict()  # collective: every rank calls
        else:
            state_dict = None
        if self.rank == 0:
            staging = folder.parent / f".staging-{ckpt}"
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            module = engine.module
            module.config.use_cache = True
            module.save_pretrained(staging, state_dict=state_dict, safe_serialization=True)
            module.config.use_cache = False
            self.tokenizer.save_pretrained(staging)
            if summary_of(state):  # the latest in-loop validation and its forgetting flags, with the weights
                (staging / VALIDATION_FILE).write_text(json.dumps({"checkpoint_step": step, **summary_of(state)},
                                                                  indent=1))
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(staging, folder)
        tag = f"step{step:06d}"
        engine.save_checkpoint(str(self.ds_dir), tag=tag, client_state={"step": step})
        if self.world > 1:
            dist.barrier()
        if self.rank == 0:
            for row in state["history"]:
                row["run_id"] = state["run_id"]
            record = register_checkpoint(self.lake, self.tracking_uri, checkpoint=ckpt, path=folder,
                                         run_id=state["run_id"], step=step, recipe=cfg.recipe,
                                         base_model=cfg.policy, domains=list(cfg.domains),
                                         artifact_root=self.artifact_root,
                                         data_fingerprint=self.data_fingerprint)
            state["checkpoints"].append({"checkpoint": ckpt, "path": str(folder),
                                         "mlflow_model_id": record.mlflow_model_id, "step": step})
            self._save_state(state)
            write_history(self.lake, state)
            for old in self.ds_dir.glob("step*"):
                if old.name != tag and old.is_dir():
                    shutil.rmtree(old, ignore_errors=True)

    def _result(self, state: dict, resumed_from: int, sources: dict, seconds: float) -> TrainResult:
        last = state["checkpoints"][-1] if state["checkpoints"] else {"checkpoint": "", "path": ""}
        history = [{**row, "run_id": state.get("run_id")} for row in state["history"]]
        return TrainResult(run_name=self.run_name, mlflow_run_id=state.get("run_id") or "",
                           checkpoint=last["checkpoint"], checkpoint_path=last["path"], history=history,
                           steps_done=int(state["step"]), resumed_from=resumed_from, data_sources=dict(sources),
                           seconds=seconds, data_fingerprint=state.get("data_fingerprint") or self.data_fingerprint,
                           data=dict(state.get("data", {})), stopped=state.get("stopped"),
                           validation=summary_of(state))


def _check_prompt_room(cfg: GRPOConfig, registry) -> None:
    """Refuse a run whose ``max_prompt_length`` would cut a long-context domain's prompts (the
    trainer left-truncates: the needle or the tables would go, and the reward with them)."""
    cut = {name: registry.domains[name].context_tokens for name in cfg.domains
           if name in registry.domains and (registry.domains[name].context_tokens or 0) > cfg.max_prompt_length}
    if cut:
        raise RunSetupError(f"max_prompt_length {cfg.max_prompt_length} would cut the prompts of "
                         + ", ".join(f"{name} ({tokens} tokens)" for name, tokens in cut.items())
                         + f": set max_prompt_length to {max(cut.values())} in the recipe")


def train(config: GRPOConfig, lake: Lake, tracking_uri: str | None = None, **options) -> TrainResult:
    """Train (or resume, or return the finished result of) the run that ``config`` describes."""
    return GRPOTrainer(config, lake, tracking_uri or lake.mlflow_uri, **options).train()
