"""The pass rates a GRPO run's learnability sampling reads, measured before it starts.

This is where a run's config meets evaluation: :mod:`training.learnability` says which policy and
sampling a run's rollouts use, :mod:`training.data` which train rows it reads, and
:func:`evaluation.pass_rates.measure_for_rollouts` measures (or finds cached) their pass rates.
It lives above both (training and evaluation never import each other) and imports no dagster, so
the CLI (``assay train``) and the ``grpo_training`` asset share it.
"""

from __future__ import annotations

from typing import Callable

from evaluation.pass_rates import PassRates, measure_for_rollouts
from storage.lake import Lake


def measure_for_training(lake: Lake, tracking_uri: str, config, *, registry=None, allow_generate: bool = False,
                         backend: str = "auto", log: Callable[[str], None] | None = None,
                         progress: bool = True) -> dict[str, PassRates]:
    """Every train row of ``config`` (a :class:`training.config.GRPOConfig`) under its starting
    policy, K = ``mixture.pass_rate_samples``, with the rollouts' sampling and dtype. Nothing to
    do (``{}``) when the run does not sample by learnability."""
    from domains import get_registry
    from training.data import load_training_data
    from training.learnability import pass_rate_checkpoint, rollout_sampling, uses_pass_rates

    if not uses_pass_rates(config):
        return {}
    registry = registry or get_registry()
    blind = [name for name in config.domains if not registry.get(name).has_verifier]
    if blind:
        from training.data import TrainingDataError

        raise TrainingDataError(f"learnability sampling needs each domain's pass rates, and {', '.join(blind)} "
                                f"{'has' if len(blind) == 1 else 'have'} no verifier to pass: set the recipe's "
                                f"`mixture: {{strategy: temperature}}` (or uniform) and `items: uniform` for a run "
                                f"with {'it' if len(blind) == 1 else 'them'}")
    data = load_training_data(config.domains, lake, registry=registry, allow_generate=allow_generate,
                              generate_n=config.train_samples_per_domain, seed=config.seed)
    return measure_for_rollouts(lake, tracking_uri, pass_rate_checkpoint(config.policy), dict(data.rows), registry,
                                params=rollout_sampling(config), samples=config.mixture.pass_rate_samples,
                                dtype=config.rollout_dtype, max_new_tokens=config.max_completion_length,
                                temperature=config.temperature, top_p=config.top_p,
                                rope_scaling=config.rope_scaling, backend=backend, log=log, progress=progress)
