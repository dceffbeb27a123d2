"""A judge: a policy checkpoint prompted with a rubric, scored from its answer's log-probabilities.

Where no reward model has been trained (or as a second opinion), a causal LM can judge an answer
pointwise: it reads the rubric, the question and the answer in its chat format and is asked to
reply Yes or No; the judge's raw score is ``log P(Yes) - log P(No)`` of its next token, so the
sigmoid the trainer applies (:func:`training.learned_rewards.to_unit`) is ``P(Yes) / (P(Yes) +
P(No))`` (MT-Bench-style judging, read from the log-probabilities rather than sampled).

On disk a judge is a reward-model folder (:mod:`generation.reward_scorer`) whose metadata says
``"kind": "judge"`` with its rubric: the policy's Hugging Face files are linked (hard links, else
copied) into it, so the judge stays loadable when the checkpoint is pruned, and every reward-model
path (``assay reward check``, promotion, GRPO's learned reward) takes it unchanged. It is gated
like any reward model: on labelled pairs (``--pairs``: a judge has no held-out pairs of its own)
with the same probes, and a pointwise judge has no position to be biased by (the order probe of
pairwise judges does not apply). torch and transformers are imported lazily.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from generation.reward_scorer import METADATA_FILE, RewardModelError, load_tokenizer

KIND = "judge"
YES, NO = "Yes", "No"
TEMPLATE = ("You are grading an answer against a rubric.\n\nRubric: {rubric}\n\nQuestion: {prompt}\n\n"
            "Answer: {answer}\n\nDoes the answer meet the rubric? Reply with one word, Yes or No.")


def _link_tree(source: Path, target: Path) -> None:
    def link(src, dst):
        try:
            os.link(src, dst)
        except OSError:  # another file system, or links not allowed: a copy
            shutil.copy2(src, dst)
    shutil.copytree(source, target, copy_function=link, ignore=shutil.ignore_patterns(METADATA_FILE, "*.lock"))


def save_judge(policy_folder: str | Path, folder: str | Path, rubric: str, metadata: dict) -> Path:
    """Write a judge folder: the policy's files and ``assay_reward_model.json`` (kind, rubric, ...)."""
    if not rubric.strip():
        raise RewardModelError("the judge's rubric is empty: say what a good answer does, e.g. 'The reply "
                               "apologises and offers a concrete remedy.'")
    folder = Path(folder)
    _link_tree(Path(policy_folder), folder)
    (folder / METADATA_FILE).write_text(json.dumps({**metadata, "kind": KIND, "rubric": rubric}, indent=2,
                                                   sort_keys=True))
    return folder


def judge_text(tokenizer, rubric: str, prompt: str, answer: str) -> str:
    content = TEMPLATE.format(rubric=rubric, prompt=prompt, answer=answer)
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                             add_generation_prompt=True)
    return content + "\n"


def fitted_text(tokenizer, rubric: str, prompt: str, answer: str, max_length: int) -> str:
    """:func:`judge_text` within ``max_length`` tokens. The verdict is read after the question that
    ends the text, so a long answer loses its start (its end stays, as a reward model reads it),
    never the question; only when the rubric and prompt alone overflow does the text lose its start."""
    text = judge_text(tokenizer, rubric, prompt, answer)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) <= max_length:
        return text
    answer_ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
    room = len(answer_ids) - (len(ids) - max_length) - 2  # a little slack: re-tokenising may merge differently
    if room > 0:
        text = judge_text(tokenizer, rubric, prompt, "[...] " + tokenizer.decode(answer_ids[-room:]))
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return tokenizer.decode(ids[-max_length:])


def _first_token(tokenizer, word: str) -> int:
    ids = tokenizer(word, add_special_tokens=False)["input_ids"]
    if not ids:
        raise RewardModelError(f"the judge's tokenizer has no token for {word!r}")
    return ids[0]


@dataclass
class JudgeScorer:
    """A loaded judge: ``scorer(prompts, answers) -> [log P(Yes) - log P(No)]``."""

    model: Any
    tokenizer: Any
    metadata: dict
    batch_size: int = 8

    @classmethod
    def load(cls, folder: str | Path, batch_size: int = 8) -> "JudgeScorer":
        import torch
        from transformers import AutoModelForCausalLM

        metadata = json.loads((Path(folder) / METADATA_FILE).read_text())
        tokenizer = load_tokenizer(folder)
        tokenizer.padding_side = "left"  # the next token is read at the last position of every row
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa")
        model.eval()
        return cls(model, tokenizer, metadata, batch_size)

    @property
    def rubric(self) -> str:
        return str(self.metadata["rubric"])

    def __call__(self, prompts: Sequence[str], answers: Sequence[str]) -> list[float]:
        import torch

        if len(prompts) != len(answers):
            raise ValueError(f"{len(prompts)} prompts but {len(answers)} answers: score them in pairs")
        yes, no = _first_token(self.tokenizer, YES), _first_token(self.tokenizer, NO)
        max_length = int(self.metadata.get("max_length") or 1024)
        texts = [fitted_text(self.tokenizer, self.rubric, p, a, max_length) for p, a in zip(prompts, answers)]
        out: list[float] = []
        with torch.no_grad():
            for start in range(0, len(texts), self.batch_size):
                batch = self.tokenizer(texts[start:start + self.batch_size], return_tensors="pt", padding=True,
                                       add_special_tokens=False)
                logits = self.model(**batch).logits[:, -1, :].float()
                logp = torch.log_softmax(logits, dim=-1)
                out.extend((logp[:, yes] - logp[:, no]).tolist())
        return [float(v) for v in out]


def create_judge(lake, tracking_uri: str, domain: str, policy: str, rubric: str, *, max_length: int = 1024):
    """Make ``policy`` (a policy reference: 'smollm2', 'tiny', a folder or a checkpoint id) a judge
    of ``domain`` with ``rubric``; saved and registered like a trained reward model (lake table
    ``reward_models``, MLflow model ``assay-reward-model``). Returns its record; it still has to
    pass ``assay reward check DOMAIN --reward-model ID --pairs FILE`` before GRPO uses it."""
    import uuid
    from datetime import datetime, timezone

    from generation.policy import policy_path
    from generation.reward_models import (RewardModelRecord, model_folder, new_reward_model_id,
                                          register_reward_model)

    now = datetime.now(timezone.utc).isoformat()
    ident = new_reward_model_id(domain, control=False, now=now, nonce="judge-" + uuid.uuid4().hex[:4])
    folder = model_folder(lake, ident)
    save_judge(policy_path(policy, lake.home), folder, rubric, {
        "reward_model": ident, "domain": domain, "base_model": policy, "max_length": max_length, "created_at": now})
    record = RewardModelRecord(reward_model=ident, domain=domain, base_model=policy, path=str(folder.resolve()),
                               config=json.dumps({"kind": KIND, "policy": policy, "rubric": rubric,
                                                  "max_length": max_length}), created_at=now)
    return register_reward_model(lake, tracking_uri, record)
