"""Typed GRPO training config, validated when a recipe is parsed.

Recipes are YAML files in ``training/recipes/`` (``tiny``, ``smollm2``) or any path; every key is a
field below (unknown keys are rejected, so a typo fails at parse time, not after an hour of
training). Names follow TRL's ``GRPOConfig`` where TRL has the concept (``beta``,
``num_generations``, ``loss_type``, ``epsilon``, ``epsilon_high``, ``scale_rewards``,
``mask_truncated_completions``, ``max_completion_length``, ``reward_weights``, ``num_iterations``,
``learning_rate``, ``max_steps``, ``gradient_accumulation_steps``, ``gradient_checkpointing``).

Rewards are hierarchical: ``reward_weights`` (top level) weighs the components of every domain;
``rewards.domains.<name>`` overrides the weights, the format pattern or the length target for one
domain. Components: ``score`` (the domain's own scorer, always computed), ``format`` (1 if the
completion matches ``format_pattern``, else 0) and ``length`` (``-max(0, tokens - length_target) /
length_target``, a penalty for rambling).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from generation.device import DeviceChoice
from generation.contract import Backend
from training.losses import ImportanceSamplingMode, LossType, ScaleRewards
from training.overoptimisation import MIN_WINDOW, REWARD_HACKING_MODES
from generation.vllm_engine import VllmSettings
from storage.errors import UserError

RECIPES_DIR = Path(__file__).resolve().parent / "recipes"
REWARD_COMPONENTS = ("score", "format", "length")
# what the trainer does when a domain's learned reward rises while its verifier falls
# (training.overoptimisation.REWARD_HACKING_MODES)
RewardHackingMode = Literal["warn", "stop"]
# what the trainer does when a validated domain falls significantly below its step-0 score
# (training.forgetting.FORGETTING_MODES)
ForgettingMode = Literal["warn", "stop", "reweight"]


class RecipeError(UserError, ValueError):
    """A recipe that cannot be used, with what to change."""


# Run and recipe names become folder names (runs/<run_name>), lake partition values
# (checkpoint=<run_name>-step000001, base-<recipe>) and MLflow LoggedModel names. The lake allows
# [A-Za-z0-9_.-]; MLflow model names forbid '.', '/', ':' and '%'; so: letters, digits, '_' and
# '-', starting with a letter or digit (no '.' or '..', no path separators, nothing that escapes runs/).
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
NAME_MAX_LENGTH = 64


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a run or recipe name (None when it can), with how to fix it."""
    if not isinstance(name, str) or not name:
        return "must be a non-empty string"
    if len(name) > NAME_MAX_LENGTH:
        return f"is {len(name)} characters long; use at most {NAME_MAX_LENGTH}"
    if not NAME_PATTERN.fullmatch(name):  # fullmatch: "$" would accept a trailing newline
        suggestion = re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-_")[:NAME_MAX_LENGTH] or "run1"
        return (f"may use only letters, digits, '_' and '-', starting with a letter or digit "
                f"(it names a folder under runs/, lake partitions and MLflow models); e.g. {suggestion!r}")
    return None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class RewardOverrides(_Strict):
    reward_weights: dict[str, float] | None = Field(
        None, description="component -> weight for this domain (score, format, length); unset = inherit")
    format_pattern: str | None = Field(
        None, description="regex (re.search) a well-formatted completion matches; feeds the 'format' component")
    length_target: int | None = Field(
        None, gt=0, description="completion tokens allowed before the 'length' penalty starts")

    @field_validator("reward_weights")
    @classmethod
    def _known_components(cls, weights):
        if weights is not None:
            unknown = sorted(set(weights) - set(REWARD_COMPONENTS))
            if unknown:
                raise ValueError(f"unknown reward components {unknown}; known: {', '.join(REWARD_COMPONENTS)}")
        return weights

    @field_validator("format_pattern")
    @classmethod
    def _regex(cls, pattern):
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"format_pattern {pattern!r} is not a regex: {exc}") from exc
        return pattern


class RewardConfig(RewardOverrides):
    domains: dict[str, RewardOverrides] = Field(
        default_factory=dict, description="per-domain overrides of the components below")


class MixtureConfig(_Strict):
    strategy: Literal["temperature", "uniform", "weights", "learnability"] = Field(
        "temperature", description="temperature: p(d) ~ size(d)^(1/temperature); uniform; weights: explicit; "
                                   "learnability: p(d) ~ (sum over d's items of p(1-p))^(1/temperature), p = the "
                                   "item's pass rate under the starting policy (training.learnability)")
    temperature: float = Field(1.0, gt=0, description="1 = proportional to size; large = towards uniform")
    weights: dict[str, float] = Field(default_factory=dict, description="explicit domain weights (strategy=weights)")
    items: Literal["uniform", "learnability"] = Field(
        "uniform", description="uniform: every row once per epoch, shuffled; learnability: rows drawn with "
                               "probability ~ p(1-p) of their current pass rate, each at most once per epoch, those "
                               "always or never passed only at explore_weight (Foster & Foerster 2025)")
    pass_rate_samples: int = Field(
        8, ge=2, description="K: samples per item behind the pass rates learnability sampling uses (drawn with "
                             "the rollouts' sampling; measured before the run when missing)")
    pass_rate_updates: Literal["online", "static"] = Field(
        "online", description="online: every rollout group (num_generations samples of the current policy) "
                              "updates its item's pass rate; static: the rates measured before the run, throughout")
    pass_rate_decay: float = Field(
        0.5, ge=0, le=1, description="weight an item's earlier pass-rate evidence keeps when a rollout group "
                                     "updates it (1: all evidence counts alike; smaller: follow the policy faster)")
    explore_weight: float = Field(
        0.01, ge=0, le=0.25, description="sampling weight of items estimated always or never passed (p(1-p) "
                                         "below it), so they are re-tried as the policy changes; 0: never")
    retire_solved: bool = Field(
        False, description="learnability sampling: items whose estimated pass rate reaches solved_pass_rate leave the "
                           "sampling pool (counted per domain in the log and MLflow solved/<domain>, not deleted: a "
                           "re-measure that finds them failing again brings them back); false: they stay at "
                           "explore_weight")
    solved_pass_rate: float = Field(
        0.95, gt=0.5, le=1, description="the estimated pass rate from which retire_solved counts an item as one the "
                                        "policy always solves")

    @model_validator(mode="after")
    def _weights_given(self):
        if self.retire_solved and not (self.items == "learnability" or self.strategy == "learnability"):
            raise ValueError("mixture.retire_solved needs per-item pass rates: set mixture.items: learnability (or "
                             "mixture.strategy: learnability), or drop retire_solved")
        if self.strategy == "weights" and not self.weights:
            raise ValueError("mixture.strategy 'weights' needs mixture.weights, e.g. {math_arith: 2, gsm: 1}")
        if any(w < 0 for w in self.weights.values()):
            raise ValueError(f"mixture.weights must be >= 0, got {self.weights}")
        return self


class DeepSpeedSection(_Strict):
    zero_stage: Literal[0, 1, 2, 3] = Field(0, description="ZeRO stage (0-3)")
    precision: Literal["fp32", "bf16"] = Field(
        "fp32", description="fp32, or bf16 weights with fp32 master copies (DeepSpeed bf16); fp16 does not run on CPU")
    autocast_bf16: bool = Field(
        False, description="fp32 weights, bf16 matmuls via torch.autocast (about 1.5x faster on CPU)")
    gradient_checkpointing: bool = Field(False, description="recompute activations in backward (less memory)")
    gradient_accumulation_steps: int = Field(1, ge=1, description="micro-batches per optimizer step")

    @field_validator("precision", mode="before")
    @classmethod
    def _no_fp16(cls, value):
        if value == "fp16":
            raise ValueError("fp16 is not supported (it needs a loss scaler this trainer does not set up, and "
                             "DeepSpeed refuses it on CPU): use bf16 (GPUs with compute capability 8.0+, and CPUs) "
                             "or fp32")
        return value


class ValidationConfig(_Strict):
    """In-loop validation (:mod:`training.validation`): held-out eval items of every trained and watched
    domain, answered greedily by the policy every ``eval_every`` steps, each domain tested against step 0."""

    eval_every: int | None = Field(
        None, ge=0, description="validate every N steps, and at step 0 and the last step; unset: about a tenth of "
                                "max_steps (ceil(max_steps / 10)); 0: no in-loop validation")
    items: int = Field(
        50, ge=2, description="held-out items per validated domain: the first N of its eval split, the items a sweep "
                              "with --limit N scores (fewer when the eval split is smaller)")
    max_new_tokens: int | None = Field(
        None, ge=1, description="greedy completion length of a validation answer; unset: the run's "
                                "max_completion_length")
    max_share: float = Field(
        0.15, gt=0, le=1, description="a due validation is skipped (said in the log) while validations have taken "
                                      "more than this share of the run's step and validation time so far; the "
                                      "step-0 and last ones always run, and so does every one when validation feeds "
                                      "back into training (forgetting: reweight, replateau_steps): its schedule is "
                                      "then part of the run. 1: never skip")
    watch: list[str] | None = Field(
        None, description="domains validated besides the trained ones (forgetting is watched on every validated "
                          "domain); unset: the registry's protected domains; []: only the trained ones")
    forgetting: ForgettingMode = Field(
        "warn", description="what a forgetting flag does (a validated domain significantly below its step-0 score: "
                            "one-sided paired test per domain, BH across them): warn = flag it in the log, MLflow, the "
                            "checkpoint and the dashboard and train on; stop = flag it and end the run after saving "
                            "that step's checkpoint; reweight = flag it and raise the domain's mixture share "
                            "(x reweight_factor per validation it stays flagged, at most reweight_max) until it recovers")
    forgetting_q: float = Field(
        0.05, gt=0, lt=1, description="the Benjamini-Hochberg level across the validated domains a drop must clear "
                                      "to flag forgetting")
    forgetting_margin: float = Field(
        0.0, ge=0, lt=1, description="a drop must exceed this (score units, 0.01 = one point) to count: H0 is 'no "
                                     "worse than step 0 by more than the margin'")
    reweight_factor: float = Field(
        2.0, gt=1, description="forgetting: reweight multiplies a flagged trained domain's mixture weight by this at "
                               "each validation it stays flagged")
    reweight_max: float = Field(
        4.0, gt=1, description="the largest multiple of its own mixture weight a reweighted domain reaches")
    replateau_steps: int = Field(
        0, ge=0, description="learnability sampling: when a trained domain's validation has set no new best for this "
                             "many steps, its train items' pass rates are measured again on the current policy "
                             "(mixture.pass_rate_samples samples each, the rollouts' sampling) and the log says "
                             "what moved; 0: never")

    @model_validator(mode="after")
    def _bounds(self):
        if self.reweight_max < self.reweight_factor:
            raise ValueError(f"validation.reweight_max ({self.reweight_max}) must be >= validation.reweight_factor "
                             f"({self.reweight_factor}): the bound cannot be below one step of the boost")
        if self.watch is not None and len(set(self.watch)) != len(self.watch):
            raise ValueError(f"validation.watch lists a domain twice: {self.watch}; list each once")
        return self

    def every(self, max_steps: int) -> int:
        """Steps between validations (0: none): ``eval_every``, else about a tenth of the run."""
        if self.eval_every is not None:
            return self.eval_every
        return max(1, -(-max_steps // 10))

    def changes_trajectory(self) -> bool:
        """Whether validation feeds back into training (reweighting, re-measured pass rates): then it is
        part of the run's identity."""
        return self.forgetting == "reweight" or self.replateau_steps > 0


class RolloutVllmSettings(VllmSettings):
    """:class:`generation.vllm_engine.VllmSettings` for an engine colocated with the trainer."""

    gpu_memory_utilization: float = Field(
        0.3, gt=0, le=1, description="CUDA: fraction of GPU memory vLLM may take for weights and KV cache (the "
                                     "trainer needs the rest); ignored on CPU")


class RolloutConfig(_Strict):
    """Where rollouts are sampled and how the trainer corrects for the sampler not being itself."""

    backend: Backend = Field(
        "auto", description="torch: the trainer's decode loop on the policy (or its rollout_dtype copy); vllm: an "
                            "in-process vLLM engine the policy's weights are pushed into after every optimizer step; "
                            "auto: vllm where installed, serving the model and measured faster (generation.torch_engine."
                            "resolve_backend), else torch")
    importance_sampling: ImportanceSamplingMode | None = Field(
        None, description="rollout/training mismatch correction (training.losses.rollout_correction): token_truncate "
                          "(Yao et al. 2025 TIS: per-token min(pi_train / pi_rollout, cap)), sequence_truncate, "
                          "token_mask, sequence_mask (TRL's modes) or none; unset: token_truncate with vllm, none "
                          "with torch")
    importance_sampling_cap: float = Field(
        2.0, ge=1.0, description="C: the largest importance weight (truncate modes) or the ratio above which a "
                                 "token/sequence is dropped (mask modes)")
    vllm: RolloutVllmSettings = Field(default_factory=RolloutVllmSettings,
                                      description="the vLLM engine's memory and compilation settings")
    server_url: str | None = Field(
        None, description="backend vllm-server: base URL of the running `vllm serve` rollouts come from (training."
                          "vllm_server); unset: $ASSAY_VLLM_SERVER_URL")
    sync_dir: str | None = Field(
        None, description="backend vllm-server: folder shared with the server that weight pushes go through; unset: "
                          "a temporary folder (a server on this machine)")

    def correction(self, engine: str) -> str:
        """The importance-sampling mode in force with rollouts from ``engine`` (torch | vllm | vllm-server)."""
        if self.importance_sampling is not None:
            return self.importance_sampling
        return "token_truncate" if engine in ("vllm", "vllm-server") else "none"


class GRPOConfig(_Strict):
    recipe: str = Field("custom", description="recipe name (set from the file name)")
    run_name: str | None = Field(None, description="run name; unset = recipe + hash of the config (reruns resume)")
    policy: str = Field("tiny", description="'smollm2', 'tiny', a Hugging Face model folder or a checkpoint id")
    domains: list[str] = Field(default_factory=list, description="domains to train on (registry names)")
    max_steps: int = Field(20, ge=1, description="optimizer steps")
    seed: int = Field(0, description="seed for data order, sampling and init")
    prompts_per_step: int = Field(2, ge=1, description="prompts per step per process (each gets num_generations)")
    num_generations: int = Field(8, ge=2, description="completions per prompt (the GRPO group size)")
    max_prompt_length: int = Field(512, ge=1, description="prompts longer than this (tokens) are left-truncated")
    rope_scaling: str | None = Field(
        None, description="RoPE scaling past the policy's trained context, TYPE:FACTOR with TYPE linear, dynamic "
                          "or yarn (generation.rope; e.g. yarn:2); the checkpoints keep it in their config")
    max_completion_length: int = Field(32, ge=1, description="new tokens per completion (per turn in an episode)")
    max_episode_turns: int = Field(
        8, ge=1, description="terminal-agent domains: turns per training episode at most (the task's own "
                             "max_turns when smaller)")
    max_episode_tokens: int = Field(
        2048, ge=64, description="terminal-agent domains: an episode's token stream (prompt, the policy's turns, "
                                 "tool outputs) ends the episode when the next turn would pass it")
    temperature: float = Field(1.0, gt=0, description="rollout sampling temperature")
    top_p: float = Field(1.0, gt=0, le=1, description="rollout nucleus sampling")
    top_k: int = Field(0, ge=0, description="rollout top-k (0 = off)")
    stop: list[str] = Field(default_factory=list, description="stop strings for rollouts")
    learning_rate: float = Field(1e-5, gt=0, description="AdamW learning rate")
    weight_decay: float = Field(0.0, ge=0, description="AdamW decoupled weight decay")
    adam_beta1: float = Field(0.9, gt=0, lt=1, description="AdamW first-moment decay")
    adam_beta2: float = Field(0.99, gt=0, lt=1, description="AdamW second-moment decay")
    max_grad_norm: float = Field(1.0, ge=0, description="gradient clipping (0 = off)")
    warmup_steps: int = Field(0, ge=0, description="linear learning-rate warmup steps")
    beta: float = Field(0.04, ge=0, description="KL coefficient to the frozen reference (k3 estimator); 0 = no reference")
    epsilon: float = Field(0.2, gt=0, lt=1, description="lower clip range of the policy ratio")
    epsilon_high: float | None = Field(None, gt=0, description="upper clip range (DAPO clip-higher); unset = epsilon")
    loss_type: LossType = Field("grpo", description="loss aggregation (see training.losses)")
    scale_rewards: ScaleRewards = Field("group", description="advantage std scaling")
    mask_truncated_completions: bool = Field(False, description="drop completions that hit the length limit from the loss")
    num_iterations: int = Field(1, ge=1, description="gradient updates per rollout batch (mu)")
    skip_zero_variance_groups: bool = Field(
        True, description="leave groups whose rewards are all equal out of the update: no forward/backward, no KL "
                          "term, not in the loss normaliser (DAPO-style dynamic sampling, cheaper); false = TRL's "
                          "exact definition (they stay in with advantage 0: KL term and normaliser). See training.losses")
    reward_weights: dict[str, float] = Field(default_factory=lambda: {"score": 1.0},
                                             description="component -> weight for every domain")
    rewards: RewardConfig = Field(default_factory=RewardConfig, description="per-domain reward overrides")
    mixture: MixtureConfig = Field(default_factory=MixtureConfig, description="domain mixture")
    train_samples_per_domain: int = Field(256, ge=1, description="train rows generated when a domain has no train_set")
    rollout_dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="dtype of the rollout copy of the policy (bf16 decodes ~1.6x faster on CPU)")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig,
                                   description="rollout engine (torch | vllm | auto) and importance-sampling correction")
    device: DeviceChoice = Field(
        "auto", description="where to train: auto (a GPU when torch sees one, else the CPU), cpu or cuda (each "
                            "rank takes the GPU of its LOCAL_RANK); see generation.device")
    deepspeed: DeepSpeedSection = Field(default_factory=DeepSpeedSection,
                                        description="DeepSpeed engine settings (ZeRO stage, precision, accumulation)")
    save_steps: int = Field(0, ge=0, description="save a checkpoint every N steps (0 = only at the end)")
    reward_hacking: RewardHackingMode = Field(
        "warn", description="domains with a learned reward: when the reward model's mean rises while the verifier's "
                            "falls over the last reward_hacking_window steps, or since the run's first window (proxy "
                            "over-optimisation, training.overoptimisation): warn = flag it in MLflow, the log and the dashboard and train on; "
                            "stop = flag it and end the run after saving that step's checkpoint")
    reward_hacking_window: int = Field(
        8, description=f"steps (of the domain's, at least {MIN_WINDOW}) the reward-hacking watch fits its "
                       "least-squares slopes over, and compares the run's first such window with its latest; no "
                       "verdict before that many are recorded")
    reward_hacking_min_change: float = Field(
        0.05, description="how much (reward units, 0-1) the learned reward must rise and the verifier fall over the "
                          "window for the watch to fire (besides both slopes clearing their noise, |t| >= 2)")
    validation: ValidationConfig = Field(
        default_factory=ValidationConfig,
        description="in-loop validation: held-out items of the trained and watched domains every eval_every steps, "
                    "tested against step 0 (forgetting: warn | stop | reweight); see training.validation")

    @field_validator("rope_scaling")
    @classmethod
    def _rope_scaling(cls, value):
        from generation.rope import RopeScaling

        scaling = RopeScaling.parse(value)
        return scaling.spec if scaling else None

    @field_validator("recipe")
    @classmethod
    def _recipe_name(cls, name):
        problem = name_problem(name)
        if problem:
            raise ValueError(f"recipe name {name!r} {problem} (for a YAML file: rename the file or set `recipe:` in it)")
        return name

    @field_validator("run_name")
    @classmethod
    def _run_name(cls, name):
        problem = name_problem(name) if name is not None else None
        if problem:
            raise ValueError(f"run name {name!r} {problem}")
        return name

    @field_validator("reward_hacking", mode="before")
    @classmethod
    def _reward_hacking_mode(cls, value):
        if value not in REWARD_HACKING_MODES:
            raise ValueError(f"reward_hacking must be 'warn' (flag a learned reward rising while its verifier falls, "
                             f"and train on) or 'stop' (flag it and end the run after saving that step's checkpoint); "
                             f"got {value!r}: set `reward_hacking: warn` or `reward_hacking: stop` in the recipe")
        return value

    @field_validator("reward_hacking_window", mode="before")
    @classmethod
    def _reward_hacking_window(cls, value):
        if isinstance(value, bool) or not isinstance(value, int) or value < MIN_WINDOW:
            raise ValueError(f"reward_hacking_window must be a whole number of steps >= {MIN_WINDOW} (a slope and its "
                             f"noise need that many points); got {value!r}: set e.g. `reward_hacking_window: 8`")
        return value

    @field_validator("reward_hacking_min_change", mode="before")
    @classmethod
    def _reward_hacking_min_change(cls, value):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 1
        if not ok:
            raise ValueError("reward_hacking_min_change must be a number in (0, 1] (reward units: the learned reward "
                             f"and the verifier both lie in 0-1); got {value!r}: set e.g. "
                             "`reward_hacking_min_change: 0.05`")
        return float(value)

    @field_validator("reward_weights")
    @classmethod
    def _components(cls, weights):
        unknown = sorted(set(weights) - set(REWARD_COMPONENTS))
        if unknown:
            raise ValueError(f"unknown reward components {unknown}; known: {', '.join(REWARD_COMPONENTS)}")
        if not any(w != 0 for w in weights.values()):
            raise ValueError("reward_weights are all 0: give at least one component a weight, e.g. {score: 1.0}")
        return weights

    @model_validator(mode="after")
    def _combinations(self):
        if self.epsilon_high is not None and self.epsilon_high < self.epsilon:
            raise ValueError(f"epsilon_high ({self.epsilon_high}) must be >= epsilon ({self.epsilon})")
        if self.deepspeed.precision == "bf16" and self.deepspeed.autocast_bf16:
            raise ValueError("choose deepspeed.precision bf16 or deepspeed.autocast_bf16, not both")
        for scope, section in [("top level", self.rewards), *[(f"rewards.domains.{d}", o)
                                                             for d, o in self.rewards.domains.items()]]:
            weights = section.reward_weights if section.reward_weights is not None else self.reward_weights
            if weights.get("format") and not (section.format_pattern or self.rewards.format_pattern):
                raise ValueError(f"{scope}: reward weight 'format' needs a format_pattern")
            if weights.get("length") and not (section.length_target or self.rewards.length_target):
                raise ValueError(f"{scope}: reward weight 'length' needs a length_target")
        learnability = self.mixture.items == "learnability" or self.mixture.strategy == "learnability"
        if self.validation.replateau_steps and not learnability:
            raise ValueError("validation.replateau_steps re-measures per-item pass rates, which only learnability "
                             "sampling keeps: set mixture.items: learnability (or mixture.strategy: learnability), or "
                             "validation.replateau_steps: 0")
        if self.validation.every(self.max_steps) == 0 and (self.validation.replateau_steps
                                                            or self.validation.forgetting != "warn"):
            raise ValueError(f"validation.eval_every is 0 (no in-loop validation), so validation.forgetting "
                             f"{self.validation.forgetting!r} and replateau_steps have nothing to act on: set "
                             "validation.eval_every (or leave it unset: a tenth of the run)")
        return self

    # -- derived ---------------------------------------------------------------------------------

    def fingerprint(self) -> str:
        """Hash of everything that changes the training trajectory. Not the run name, and not
        ``max_steps``: the schedule does not depend on it, so asking the same run for more steps
        continues it from where it stopped. Not ``device``: where a run computes is not what it
        trains (a run started on a CPU resumes on a GPU). Not ``rollout.vllm`` (memory and
        compilation: speed, not what is sampled). Not the reward-hacking watch (``reward_hacking*``): it
        watches the trajectory and, with ``stop``, ends it early, as a smaller ``max_steps`` would. Nor the
        ``validation`` section, for the same reason, unless it feeds back into training (``forgetting:
        reweight``, ``replateau_steps``). The ``rollout`` section (and the learnability
        fields of ``mixture``) only where it differs from the default, so the runs of recipes written before it existed keep their names and resume."""
        data = self.model_dump(exclude={"run_name", "max_steps", "device", "reward_hacking", "reward_hacking_window",
                                        "reward_hacking_min_change", "validation"})
        if self.validation.changes_trajectory():  # it reweights the mixture or re-measures pass rates
            data["validation"] = self.validation.model_dump()
        rollout = data.pop("rollout")
        for key in ("vllm", "server_url", "sync_dir"):  # where rollouts are computed, not what they are
            rollout.pop(key)
        default = RolloutConfig().model_dump(exclude={"vllm", "server_url", "sync_dir"})
        if rollout != default:
            data["rollout"] = rollout
        for key in ("items", "pass_rate_samples", "pass_rate_updates", "pass_rate_decay",
                    "explore_weight", "retire_solved", "solved_pass_rate"):  # added later: only where not the default
            if data["mixture"][key] == MixtureConfig.model_fields[key].default:
                data["mixture"].pop(key)
        for key in ("max_episode_turns", "max_episode_tokens", "rope_scaling"):  # added later, as above
            if data[key] == type(self).model_fields[key].default:
                data.pop(key)
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:8]

    def resolved_run_name(self) -> str:
        return self.run_name or f"{self.recipe}-{self.fingerprint()}"

    def flat_params(self) -> dict[str, str]:
        """The resolved config as flat ``a.b.c -> str`` pairs (MLflow params)."""
        flat: dict[str, str] = {}

        def walk(prefix: str, value) -> None:
            if isinstance(value, dict) and value:
                for key, inner in value.items():
                    walk(f"{prefix}.{key}" if prefix else str(key), inner)
            else:
                flat[prefix] = json.dumps(value) if isinstance(value, (list, dict)) else str(value)

        walk("", self.model_dump())
        flat["run_name"] = self.resolved_run_name()
        return flat


class TrainRequest(BaseModel):
    """One training launch: the recipe, what to override in it, and how many processes run it
    (the ``policy_checkpoint`` asset's config; the recipe itself is :class:`GRPOConfig`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    recipe: str = Field("", description="tiny | smollm2 | path to a recipe YAML (empty: the policy resource's recipe)")
    domains: list[str] = Field(default_factory=list, description="domains to train on (empty: the recipe's); each "
                                                                 "needs a gated train_set")
    steps: int | None = Field(None, description="optimizer steps (unset: the recipe's max_steps)")
    seed: int | None = Field(None, description="seed for data order, sampling and init (unset: the recipe's)")
    backend: Literal["", "torch", "vllm", "vllm-server", "auto"] = Field(
        "", description="rollout engine (the recipe's rollout.backend; empty: the recipe's own)")
    reward_hacking: Literal["", "warn", "stop"] = Field(
        "", description="the recipe's reward_hacking (empty: the recipe's own): domains with a learned reward, when "
                        "the reward model's mean rises while the verifier's falls, warn flags it and trains on, stop "
                        "flags it and ends the run after saving that step's checkpoint")
    forgetting: Literal["", "warn", "stop", "reweight"] = Field(
        "", description="the recipe's validation.forgetting (empty: the recipe's own): when a validated domain falls "
                        "significantly below its step-0 score, warn flags it and trains on, stop flags it and ends the "
                        "run after saving that step's checkpoint, reweight raises its mixture share until it recovers")
    nproc: int = Field(1, description="processes (ranks); more than one runs under torchrun with gloo on CPU")
    threads_per_process: int = Field(2, description="OMP_NUM_THREADS for each rank (without it CPU training runs "
                                                    "10-50x slower)")

    @field_validator("steps")
    @classmethod
    def _some_steps(cls, value):
        if value is not None and value < 1:
            raise ValueError(f"steps must be >= 1, got {value}; leave it unset for the recipe's max_steps")
        return value

    @field_validator("nproc", "threads_per_process")
    @classmethod
    def _at_least_one(cls, value, info):
        if value < 1:
            raise ValueError(f"{info.field_name} must be >= 1, got {value}")
        return value


def recipe_path(name_or_path: str) -> Path:
    path = Path(name_or_path).expanduser()
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise RecipeError(f"recipe file {path} does not exist")
        return path
    candidate = RECIPES_DIR / f"{name_or_path}.yaml"
    if not candidate.is_file():
        known = sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))
        raise RecipeError(f"unknown recipe {name_or_path!r} (known: {', '.join(known)}; or pass a YAML path)")
    return candidate


def _format_errors(exc: ValidationError, source: str) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        parts.append(f"{where}: {err['msg']} (got {err.get('input')!r:.80})")
    return f"invalid recipe {source}: " + "; ".join(parts)


def parse_config(data: dict, source: str = "config") -> GRPOConfig:
    try:
        return GRPOConfig.model_validate(data)
    except ValidationError as exc:
        raise RecipeError(_format_errors(exc, source)) from None


def load_recipe(name_or_path: str, **overrides) -> GRPOConfig:
    """Parse a recipe (name in training/recipes or a YAML path) and apply non-None overrides."""
    import yaml

    path = recipe_path(name_or_path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise RecipeError(f"recipe {path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise RecipeError(f"recipe {path} must be a mapping of settings, got {type(data).__name__}")
    data.setdefault("recipe", path.stem)
    for key, value in overrides.items():
        if value is None:
            continue
        # a section override (e.g. rollout={"backend": "vllm"}) keeps the recipe's other keys
        data[key] = {**data[key], **value} if isinstance(value, dict) and isinstance(data.get(key), dict) else value
    return parse_config(data, str(path))
