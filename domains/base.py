"""The `Domain` contract: what every built-in domain and every plugin provides.

A domain is a Python module exposing ``DOMAIN`` (one :class:`Domain`) or ``DOMAINS`` (a list, for
packs). Behaviour is passed as plain callables so a domain file needs nothing but this class::

    DOMAIN = Domain(name="unit_convert", owner="data@acme", description="...", tags=("math",),
                    samples=my_samples, score=my_score)

``samples(split, n, seed)`` yields dicts with ``id`` (stable str), ``prompt``, ``answer`` (str) and
an optional ``metadata`` dict; ``"train"`` and ``"eval"`` must be disjoint. ``score(completion,
sample)`` returns a float in [0, 1].

Scoring in batches: GRPO scores a whole step's rollouts and sweeps a whole batch of eval samples
per domain in one call of :meth:`Domain.safe_score_many`, as TRL's reward functions take batches.
A domain whose scorer is cheaper in bulk (the ``code`` domain runs a batch in a sandbox pool)
passes ``score_many(completions, samples) -> list[float]`` as well; without it the batch is
``score`` mapped over the samples. Both must agree item for item.

A learned reward: ``learned_reward=LearnedReward()`` makes GRPO reward the domain with its reward
model (``assay reward train DOMAIN``) instead of, or blended with, ``score``; training refuses the
domain until that reward model's latest ``assay reward check DOMAIN`` passed. ``score`` stays
computed and logged beside it as the gold signal (:mod:`training.learned_rewards`).

A domain with no verifier: ``score=None`` with ``learned_reward=LearnedReward()`` (weight 1.0)
declares an open-answer domain (reports, descriptions) whose only reward is its reward model.
Everything that needs an exact verdict says so instead of guessing one: :meth:`safe_score_many`
raises :class:`NoVerifierError`; GRPO logs no ``accuracy`` and no gold signal for it (so its
over-optimisation watch has no verdict); sweeps, attacks and policy pass rates skip it with that
reason; its self-test checks the data contract only, and its reward is gated by
``assay reward check``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

SPLITS = ("train", "eval")
SAFETY_POLICIES = ("clean", "adversarial")
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")

# SmolLM2-135M (the default policy) has an 8192-token context; keep room for the completion.
DEFAULT_CONTEXT_TOKENS = 8192
DEFAULT_MAX_COMPLETION_TOKENS = 512
DEFAULT_MAX_PROMPT_TOKENS = DEFAULT_CONTEXT_TOKENS - DEFAULT_MAX_COMPLETION_TOKENS
DEFAULT_EVAL_SIZE = 200
PASS_SCORE = 1.0  # a sample passes when it earns full credit (pass@k, policy pass rates, online learnability)

SampleFn = Callable[[str, int, int], Iterable[dict]]
ScoreFn = Callable[[str, dict], float]
ScoreManyFn = Callable[[Sequence[str], Sequence[dict]], Sequence[float]]
ExtraChecksFn = Callable[[], Mapping[str, Mapping[str, Any]]]


class DomainError(ValueError):
    """A domain definition or a domain's output breaks the contract."""


@dataclass(frozen=True)
class LearnedReward:
    """A domain's learned reward (a reward model trained by ``assay reward train DOMAIN``).

    - ``reward_model``: a reward-model id (``rm-<domain>-...``, see ``assay reward list``),
      ``"latest"`` (the domain's newest) or ``"champion"`` (the one ``assay reward promote`` last
      made its champion), resolved when a run starts.
    - ``weight``: the learned reward's share of the domain's primary reward term, in (0, 1]: GRPO's
      ``score`` term becomes ``weight * learned + (1 - weight) * score``; 1.0 (default) replaces the
      domain's scorer, which is still computed and logged as the gold signal.
    - ``gate``: the domain's bar for its reward model, overrides of the gate's defaults by field of
      ``quality.reward_gate_config.RewardGateConfig`` (e.g. ``{"min_accuracy_low": 0.75}``, or
      ``{"probes": [...]}`` without a probe whose hack is a right answer here). ``assay reward
      check DOMAIN`` runs with it, and GRPO, the Dagster check and promotion accept only a check
      whose bar was at least this strict: a laxer bar on the command line cannot let a reward
      model into training. Checked in full by ``assay domains check`` (this layer cannot see the
      gate's fields).

    The reward model's raw output (an unbounded Bradley-Terry logit) enters as ``sigmoid(raw)``, in
    (0, 1): the modelled probability that the completion beats one scored 0.
    """

    reward_model: str = "latest"
    weight: float = 1.0
    gate: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.reward_model, str) or not self.reward_model.strip():
            raise DomainError(f"learned_reward.reward_model must be a reward-model id (see `assay reward list`) or "
                              f"'latest', got {self.reward_model!r}")
        weight = self.weight
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight <= 1:
            raise DomainError(f"learned_reward.weight must be a number in (0, 1] (1.0: the learned reward replaces "
                              f"the domain's scorer; 0.5: half each), got {weight!r}")
        object.__setattr__(self, "weight", float(weight))
        gate = self.gate
        if hasattr(gate, "model_dump"):  # a RewardGateConfig: keep what was set, so defaults stay the gate's
            gate = gate.model_dump(exclude_unset=True)
        if not isinstance(gate, Mapping) or not all(isinstance(k, str) for k in gate):
            raise DomainError(f"learned_reward.gate must map gate fields to values (e.g. {{'min_accuracy_low': 0.75}}; "
                              f"see `assay reward check --help`), got {self.gate!r}")
        object.__setattr__(self, "gate", dict(gate))


class ScoringError(DomainError):
    """Scoring a batch failed: the scorer raised or broke the contract. ``sample_ids`` are the
    samples concerned: the one that failed when it is known, else the whole batch."""

    def __init__(self, message: str, domain: str, sample_ids: Sequence[str | None]):
        super().__init__(message)
        self.domain = domain
        self.sample_ids = tuple(sample_ids)


@dataclass(frozen=True)
class Domain:
    """One downstream domain: where its data comes from and how a completion is scored.

    Required: ``name`` (lower_snake_case, unique), ``owner``, ``description``, ``samples``,
    ``score``. Optional settings:

    - ``tags``: free-form labels used to filter in the CLI and dashboard.
    - ``safety_policy``: ``"clean"`` (default) or ``"adversarial"`` for domains whose prompts are
      harmful on purpose (refusal training); adversarial domains are exempt from the
      ``harmful``/``toxic`` prompt gates, never from ``pii``/``secret``.
    - ``eval_size``: how many eval items sweeps and contamination checks use.
    - ``max_prompt_tokens``: prompts estimated longer than this are quarantined as ``too_long``.
    - ``context_tokens``: a long-context domain's length bucket, in the policy's tokens (e.g. 4096
      for ``long_needle_4k``): its prompts are measured with the policy's tokenizer, not estimated,
      and ``max_prompt_tokens`` defaults to it.
    - ``answer_pattern``: a regex every reference answer must fully match (format gate).
    - ``gate_thresholds``: per-domain overrides of the quality gates' thresholds, by name.
    - ``eval_samples_per_item``: K, the samples per eval item in sweeps.
    - ``protected``: regressions here block promotion (Holm-corrected ERROR), not just warn.
    - ``score_many``: ``score_many(completions, samples) -> list[float]``, the same scores as
      ``score`` for a whole batch in one call (e.g. run in parallel); default: ``score`` mapped.
    - ``extra_checks``: ``extra_checks() -> {name: {"passed": bool, "detail": str}}``, checks of the
      domain's own verifier that the self-test (``assay domains check``, the ``selftest`` gate)
      runs beside the generic ones; a failing one fails the domain (terminal task suites check
      that every task's oracle passes and doing nothing fails).
    - ``episode_task``: ``episode_task(sample) -> Task`` (:mod:`domains.task_folder`) for a domain of
      terminal tasks: sweeps then run each sample as a multi-turn episode of the policy in a
      sandboxed terminal (:mod:`generation.agent_loop`), scored by the task's hidden tests; ``score``
      stays the single-turn view (the completion run as one script).
    - ``attacks``: ``attacks(sample) -> {family: [completions]}``, the domain's own reward hacks
      (built from the prompt, never the answer), run by ``assay domains attack`` and the self-test
      beside the generic families of :mod:`quality.reward_attacks`; any that scores above 0 fails it.
    - ``learned_reward``: a :class:`LearnedReward`: GRPO rewards the domain with its gated reward
      model (``score`` stays the logged gold signal); None (default): ``score`` alone.
    - ``equivalents``: ``equivalents(sample) -> {family: [completions]}``, correct answers in other
      forms that only the domain knows (another valid colouring, a permutation of an unordered
      answer, a refusal in other words), built from the sample and its reference. The environment
      report card (:mod:`quality.report_card.recall`) scores them beside the generic equivalence
      families as training scores them: each must score 1.0, and one that does not is a verifier
      bug (a false negative), the mirror image of ``attacks``.
    """

    name: str
    owner: str
    description: str
    samples: SampleFn
    score: ScoreFn | None = None  # None: no verifier (needs learned_reward; see the module docstring)
    tags: tuple[str, ...] = ()
    safety_policy: str = "clean"
    eval_size: int = DEFAULT_EVAL_SIZE
    max_prompt_tokens: int = DEFAULT_MAX_PROMPT_TOKENS
    answer_pattern: str | None = None
    gate_thresholds: Mapping[str, float] = field(default_factory=dict)
    eval_samples_per_item: int = 1
    protected: bool = False
    score_many: ScoreManyFn | None = None
    extra_checks: ExtraChecksFn | None = None
    episode_task: Callable[[dict], Any] | None = None
    context_tokens: int | None = None
    attacks: Callable[[dict], Mapping[str, Sequence[str]]] | None = None
    learned_reward: LearnedReward | None = None
    equivalents: Callable[[dict], Mapping[str, Sequence[str]]] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME_PATTERN.match(self.name):
            raise DomainError(
                f"domain name {self.name!r} must be lower_snake_case (letters, digits, '_', "
                "starting with a letter), e.g. 'unit_convert'"
            )
        for attr in ("owner", "description"):
            value = getattr(self, attr)
            if not isinstance(value, str) or not value.strip():
                raise DomainError(f"domain {self.name!r}: {attr} must be a non-empty string")
        if not callable(self.samples):
            raise DomainError(f"domain {self.name!r}: samples must be a callable, got {type(self.samples).__name__}")
        if self.score is not None and not callable(self.score):
            raise DomainError(f"domain {self.name!r}: score must be a callable (completion, sample) -> float, or None "
                              f"for a domain with no verifier, got {type(self.score).__name__}")
        if self.score_many is not None and not callable(self.score_many):
            raise DomainError(f"domain {self.name!r}: score_many must be a callable or None, got "
                              f"{type(self.score_many).__name__}")
        if self.episode_task is not None and not callable(self.episode_task):
            raise DomainError(f"domain {self.name!r}: episode_task must be a callable or None, got "
                              f"{type(self.episode_task).__name__}")
        if self.attacks is not None and not callable(self.attacks):
            raise DomainError(f"domain {self.name!r}: attacks must be a callable or None, got "
                              f"{type(self.attacks).__name__}")
        if self.equivalents is not None and not callable(self.equivalents):
            raise DomainError(f"domain {self.name!r}: equivalents must be a callable (sample) -> {{family: "
                              f"[completions]}} or None, got {type(self.equivalents).__name__}")
        if self.learned_reward is not None and not isinstance(self.learned_reward, LearnedReward):
            raise DomainError(f"domain {self.name!r}: learned_reward must be a LearnedReward (from domains.base "
                              f"import LearnedReward; e.g. LearnedReward(reward_model='latest')) or None, got "
                              f"{type(self.learned_reward).__name__}")
        if self.score is None:
            if self.learned_reward is None:
                raise DomainError(f"domain {self.name!r} has no reward: pass score=my_score (a verifier, "
                                  f"(completion, sample) -> float in [0, 1]) or, for a domain with no verifier, "
                                  f"learned_reward=LearnedReward() and train its reward model with "
                                  f"`assay reward train {self.name} --pairs FILE`")
            if self.learned_reward.weight != 1.0:
                raise DomainError(f"domain {self.name!r} has no verifier (score=None), so its learned reward is its "
                                  f"whole reward: learned_reward.weight must be 1.0, got {self.learned_reward.weight}")
            if (self.score_many is not None or self.episode_task is not None or self.attacks is not None
                    or self.equivalents is not None):
                raise DomainError(f"domain {self.name!r} has no verifier (score=None): score_many, episode_task, "
                                  "attacks and equivalents need one; remove them or pass score")
        if self.extra_checks is not None and not callable(self.extra_checks):
            raise DomainError(f"domain {self.name!r}: extra_checks must be a callable or None, got "
                              f"{type(self.extra_checks).__name__}")
        if isinstance(self.tags, str) or not all(isinstance(t, str) for t in self.tags):
            raise DomainError(f"domain {self.name!r}: tags must be a tuple of strings, e.g. ('math',)")
        object.__setattr__(self, "tags", tuple(self.tags))
        if self.safety_policy not in SAFETY_POLICIES:
            raise DomainError(
                f"domain {self.name!r}: safety_policy {self.safety_policy!r} is not one of "
                f"{', '.join(SAFETY_POLICIES)}"
            )
        if self.context_tokens is not None:
            if not isinstance(self.context_tokens, int) or self.context_tokens < 1:
                raise DomainError(f"domain {self.name!r}: context_tokens must be a positive int (the length bucket "
                                  f"in tokens, e.g. 4096) or None, got {self.context_tokens!r}")
            if self.max_prompt_tokens == DEFAULT_MAX_PROMPT_TOKENS:  # the bucket is the limit unless set
                object.__setattr__(self, "max_prompt_tokens", self.context_tokens)
        for attr in ("eval_size", "max_prompt_tokens", "eval_samples_per_item"):
            value = getattr(self, attr)
            if not isinstance(value, int) or value < 1:
                raise DomainError(f"domain {self.name!r}: {attr} must be a positive int, got {value!r}")
        if self.answer_pattern is not None:
            try:
                re.compile(self.answer_pattern)
            except re.error as exc:
                raise DomainError(f"domain {self.name!r}: answer_pattern is not a regex: {exc}") from exc
        object.__setattr__(self, "gate_thresholds", dict(self.gate_thresholds))

    # -- checked access -------------------------------------------------------------------------

    def generate(self, split: str, n: int, seed: int = 0) -> list[dict]:
        """Call ``samples`` and check every row against the contract (stable ids, str fields)."""
        if split not in SPLITS:
            raise DomainError(f"split must be one of {SPLITS}, got {split!r}")
        rows = []
        for row in self.samples(split, n, seed):
            rows.append(normalize_sample(self.name, row))
            if len(rows) >= n:
                break
        return rows

    def eval_items(self) -> list[dict]:
        """The eval set: what sweeps benchmark and contamination checks compare against."""
        return self.generate("eval", self.eval_size, seed=0)

    @property
    def has_verifier(self) -> bool:
        """Whether the domain scores completions itself (``score``); False: only its learned reward can."""
        return self.score is not None

    def _require_verifier(self) -> None:
        if self.score is None:
            raise NoVerifierError(self.name)

    def safe_score(self, completion: str, sample: dict) -> float:
        """``score`` clamped to [0, 1]; a scorer that returns a non-number breaks the contract."""
        self._require_verifier()
        value = self.score(completion, sample)
        if not _is_score(value):
            raise DomainError(f"domain {self.name!r}: score returned {value!r}, expected a float in [0, 1]")
        return min(1.0, max(0.0, float(value)))

    def safe_score_many(self, completions: Sequence[str], samples: Sequence[dict]) -> list[float]:
        """Scores of a batch (``completions[i]`` against ``samples[i]``), each checked and clamped
        like :meth:`safe_score`: one ``score_many`` call when the domain has one, else ``score``
        mapped over the batch. A scorer that raises, returns a non-number or a list of the wrong
        length raises :class:`ScoringError`, naming the domain and the samples; nothing is scored 0."""
        self._require_verifier()
        completions, samples = list(completions), list(samples)
        if len(completions) != len(samples):
            raise DomainError(f"domain {self.name!r}: {len(completions)} completions for {len(samples)} samples; "
                              "pass one completion per sample")
        if not completions:
            return []
        if self.score_many is None:
            return [self._score_one(c, s) for c, s in zip(completions, samples)]
        ids = [_sample_id(s) for s in samples]
        try:
            values = list(self.score_many(completions, samples))
        except Exception as exc:
            raise ScoringError(f"domain {self.name!r}: score_many raised on a batch of {len(samples)} samples "
                               f"({_id_list(ids)}): {type(exc).__name__}: {exc}", self.name, ids) from exc
        if len(values) != len(samples):
            raise ScoringError(f"domain {self.name!r}: score_many returned {len(values)} scores for "
                               f"{len(samples)} samples; it must return one per sample, in order", self.name, ids)
        for value, sample_id in zip(values, ids):
            if not _is_score(value):
                raise ScoringError(f"domain {self.name!r}: score_many returned {value!r} for sample {sample_id!r}, "
                                   "expected a float in [0, 1] (a Python float or int)", self.name, [sample_id])
        return [min(1.0, max(0.0, float(v))) for v in values]

    def _score_one(self, completion: str, sample: dict) -> float:
        """:meth:`safe_score` of one sample of a batch; a failure names the sample."""
        sample_id = _sample_id(sample)
        try:
            value = self.score(completion, sample)
        except Exception as exc:
            raise ScoringError(f"domain {self.name!r}: score raised on sample {sample_id!r}: "
                               f"{type(exc).__name__}: {exc}", self.name, [sample_id]) from exc
        if not _is_score(value):
            raise ScoringError(f"domain {self.name!r}: score returned {value!r} for sample {sample_id!r}, "
                               "expected a float in [0, 1]", self.name, [sample_id])
        return min(1.0, max(0.0, float(value)))

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "owner": self.owner, "tags": list(self.tags), "description": self.description}


class NoVerifierError(DomainError):
    """Something asked a domain with no verifier (``score=None``) for an exact score."""

    def __init__(self, domain: str):
        self.domain = domain
        super().__init__(f"domain {domain!r} has no verifier (score=None): it is rewarded only by its learned reward "
                         f"(`assay reward check {domain}` gates it), so nothing can score its completions exactly")


def _is_score(value: Any) -> bool:
    """A real number (bool is not a score, NaN is not a number)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and value == value


def _sample_id(sample: Any) -> str | None:
    return sample.get("id") if isinstance(sample, Mapping) else None


def _id_list(ids: Sequence[str | None], shown: int = 5) -> str:
    more = f", ... {len(ids) - shown} more" if len(ids) > shown else ""
    return ", ".join(repr(i) for i in ids[:shown]) + more


def normalize_sample(domain: str, row: Any) -> dict:
    """Validate one generated sample; returns a copy with ``metadata`` always a dict."""
    if not isinstance(row, Mapping):
        raise DomainError(f"domain {domain!r}: samples yielded {type(row).__name__}, expected a dict")
    missing = [k for k in ("id", "prompt", "answer") if k not in row]
    if missing:
        raise DomainError(f"domain {domain!r}: sample is missing {', '.join(missing)}: {dict(row)!r:.200}")
    for key in ("id", "prompt", "answer"):
        if not isinstance(row[key], str):
            raise DomainError(
                f"domain {domain!r}: sample field {key!r} must be str, got {type(row[key]).__name__}"
            )
    metadata = row.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise DomainError(f"domain {domain!r}: sample metadata must be a dict")
    return {"id": row["id"], "prompt": row["prompt"], "answer": row["answer"], "metadata": dict(metadata)}
