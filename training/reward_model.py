"""Train a learned reward model on preference pairs (Bradley-Terry), track it and register it.

Why: a domain without an exact checker still needs a reward; a reward model learned from labelled
comparisons is the standard answer (InstructGPT, Skywork-Reward), and Assay trains it here rather
than trusting one from outside, so it can be gated like any verifier (:mod:`quality.reward_gate`).

The loss is Bradley-Terry's: ``-log sigmoid(r(prompt, chosen) - r(prompt, rejected))`` averaged
over a batch of pairs, with chosen and rejected in one forward pass. The network is
:mod:`generation.reward_scorer`'s (the base causal LM's decoder + a linear head on the last token),
every parameter trained.

The optimiser is a plain ``torch.optim.AdamW`` loop in one process, not the DeepSpeed engine of
:mod:`training.engine`: that engine is built from a GRPO recipe (rollouts, reference model, KL,
ZeRO stages sized for a policy) and a 135M reward model fits one process's memory with room to
spare; a multi-process reward-model run would hand the same module and AdamW to
``deepspeed.initialize`` as the GRPO trainer does.

Data: the pairs are split by prompt (:func:`storage.preference_pairs.split_pairs`); the held-out
pairs are never trained on and are saved beside the model for the gate. ``shuffle_labels`` makes
the control that must fail the gate (the same pairs, chosen and rejected swapped on a random half).

Records: an MLflow run (params, per-step loss/accuracy/margin, held-out accuracy), the folder under
``$ASSAY_HOME/reward_models/<id>/``, a version of ``assay-reward-model`` and a lake row
(:mod:`generation.reward_models`). torch is imported inside the functions.
"""

from __future__ import annotations

import random
import secrets
import time
from datetime import datetime, timezone
from typing import Callable, Sequence

from domains.base import NAME_PATTERN
from generation.reward_models import (HELDOUT_FILE, RewardModelRecord, model_folder, new_reward_model_id,
                                      register_reward_model)
from storage.lake import Lake
from storage.preference_pairs import PreferencePair, pairs_fingerprint, split_pairs, write_pairs
from storage.tracking import Tracker
from training.reward_config import RewardTrainConfig

METRICS_EVERY = 10  # steps per MLflow batch of step metrics


class RewardTrainingError(ValueError):
    """Reward-model training that cannot start, with what to change."""


def shuffled_labels(pairs: Sequence[PreferencePair], seed: int) -> list[PreferencePair]:
    """The control's training pairs: chosen and rejected swapped on a seeded random half."""
    rng = random.Random(f"shuffle-{seed}")
    out = []
    for pair in pairs:
        if rng.random() < 0.5:
            pair = PreferencePair(id=pair.id, prompt=pair.prompt, chosen=pair.rejected, rejected=pair.chosen,
                                  line=pair.line, metadata=pair.metadata)
        out.append(pair)
    return out


def pair_accuracy(chosen: Sequence[float], rejected: Sequence[float]) -> float | None:
    """Share of pairs whose chosen answer scored strictly higher (a tie is not a preference)."""
    if not chosen:
        return None
    return sum(c > r for c, r in zip(chosen, rejected, strict=True)) / len(chosen)


def bradley_terry_loss(chosen_rewards, rejected_rewards):
    """``mean(-log sigmoid(r_chosen - r_rejected))``: the negative log-likelihood that each pair's
    chosen answer wins under the Bradley-Terry model."""
    import torch.nn.functional as F

    return -F.logsigmoid(chosen_rewards - rejected_rewards).mean()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")  # orders "latest" within a second


def train_reward_model(lake: Lake, tracking_uri: str, domain: str, pairs: Sequence[PreferencePair],
                       config: RewardTrainConfig, *, pairs_source: str | None = None,
                       log: Callable[[str], None] = lambda message: None) -> RewardModelRecord:
    """Train, save, track and register a reward model for ``domain`` on ``pairs``; returns its record."""
    import torch

    from generation.device import EMULATED_BF16_NOTE, cpu_computes_bf16
    from generation.policy import policy_path
    from generation.reward_scorer import new_network, save_reward_model, score_texts, text_format, encode

    if not isinstance(domain, str) or not NAME_PATTERN.match(domain):
        raise RewardTrainingError(f"domain name {domain!r} must be lower_snake_case (letters, digits, '_', "
                                  "starting with a letter), as every Assay domain's name is")
    try:
        train, heldout = split_pairs(pairs, config.heldout_fraction, config.seed)
    except ValueError as exc:
        raise RewardTrainingError(str(exc)) from None
    if config.shuffle_labels:
        train = shuffled_labels(train, config.seed)
    base_folder = policy_path(config.base, lake.home)
    created = _now()
    ident = new_reward_model_id(domain, control=config.shuffle_labels, now=created, nonce=secrets.token_hex(2))
    folder = model_folder(lake, ident)
    fingerprint = pairs_fingerprint(pairs)

    tracker = Tracker(tracking_uri, artifact_root=str(lake.mlflow_artifacts))
    params = {**{f"config.{k}": v for k, v in config.model_dump().items()}, "domain": domain,
              "train_pairs": len(train), "heldout_pairs": len(heldout), "pairs_fingerprint": fingerprint,
              "pairs_source": pairs_source or "", "base_folder": str(base_folder)}
    with tracker.run(f"reward-{ident}", params, tags={"assay.kind": "reward_model", "assay.domain": domain,
                                                      "assay.reward_model": ident}):
        torch.manual_seed(config.seed)
        network, tokenizer = new_network(base_folder, seed=config.seed)
        autocast = config.autocast_bf16 and cpu_computes_bf16()
        if config.autocast_bf16 and not autocast:
            log(EMULATED_BF16_NOTE.format(what="the reward model's training"))
        optimizer = torch.optim.AdamW(network.parameters(), lr=config.learning_rate,
                                      weight_decay=config.weight_decay)
        rng = random.Random(f"order-{config.seed}")
        steps, pending, loss_value = 0, {}, None
        started = time.perf_counter()
        for epoch in range(config.epochs):
            order = list(range(len(train)))
            rng.shuffle(order)
            for start in range(0, len(order), config.batch_size):
                if config.max_steps is not None and steps >= config.max_steps:
                    break
                batch = [train[i] for i in order[start:start + config.batch_size]]
                prompts = [p.prompt for p in batch]
                tokens = encode(tokenizer, prompts + prompts, [p.chosen for p in batch] + [p.rejected for p in batch],
                                config.max_length)
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                    rewards = network(**tokens).float()
                chosen, rejected = rewards[:len(batch)], rewards[len(batch):]
                loss = bradley_terry_loss(chosen, rejected)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if config.max_grad_norm > 0:
                    torch.nn.utils.clip_grad_norm_(network.parameters(), config.max_grad_norm)
                optimizer.step()
                steps += 1
                loss_value = float(loss.detach())
                pending[steps] = {"loss": loss_value, "accuracy": float((chosen > rejected).float().mean()),
                                  "margin": float((chosen - rejected).mean().detach()), "epoch": float(epoch)}
                if steps % METRICS_EVERY == 0:
                    for step, metrics in pending.items():
                        tracker.log_metrics(step, metrics)
                    pending = {}
                    log(f"reward model {ident}: step {steps}, loss {loss_value:.4f}")
        for step, metrics in pending.items():
            tracker.log_metrics(step, metrics)
        seconds = time.perf_counter() - started
        if steps == 0:
            raise RewardTrainingError("no optimizer step ran: add pairs or raise epochs / max_steps")

        def accuracy_on(subset: Sequence[PreferencePair]) -> float | None:
            prompts = [p.prompt for p in subset]
            scores = score_texts(network, tokenizer, prompts + prompts, [p.chosen for p in subset]
                                 + [p.rejected for p in subset], max_length=config.max_length,
                                 batch_size=max(config.batch_size, 8), autocast_bf16=autocast)
            return pair_accuracy(scores[:len(subset)], scores[len(subset):])

        train_accuracy, heldout_accuracy = accuracy_on(train), accuracy_on(heldout)
        tracker.log_metrics(steps, {"train_accuracy": train_accuracy, "heldout_accuracy": heldout_accuracy,
                                    "train_seconds": seconds})
        save_reward_model(network, tokenizer, folder, {
            "reward_model": ident, "domain": domain, "base_model": config.base, "max_length": config.max_length,
            "text_format": text_format(tokenizer), "pairs_fingerprint": fingerprint,
            "shuffled_labels": config.shuffle_labels, "created_at": created, "autocast_bf16": autocast})
        write_pairs(heldout, folder / HELDOUT_FILE)
        tracker.log_artifact(str(folder / HELDOUT_FILE))
        record = RewardModelRecord(
            reward_model=ident, domain=domain, base_model=config.base, path=str(folder.resolve()),
            pairs_source=pairs_source, pairs_fingerprint=fingerprint, train_pairs=len(train),
            heldout_pairs=len(heldout), shuffled_labels=config.shuffle_labels, steps=steps, final_loss=loss_value,
            train_accuracy=train_accuracy, heldout_accuracy=heldout_accuracy, train_seconds=seconds,
            mlflow_run_id=tracker.run_id, config=config.model_dump_json(), created_at=created)
        register_reward_model(lake, tracking_uri, record)
        tracker.set_tags({"assay.mlflow_model_id": record.mlflow_model_id or ""})
    log(f"reward model {ident}: {steps} steps in {seconds:.1f} s, held-out accuracy {heldout_accuracy:.3f} "
        f"on {len(heldout)} pairs")
    return record
