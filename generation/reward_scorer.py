"""Learned reward models: a causal LM with a scalar head, saved, loaded and scored in batches.

The network is a Hugging Face causal LM's decoder (``model.base_model``, so the vocabulary-sized LM
head is never computed) followed by one linear layer on the hidden state of the last real
(non-pad) token of ``prompt + answer``: the standard reward-model shape (InstructGPT, TRL's
``AutoModelForSequenceClassification`` rewards), read as "how good is this answer to this prompt".
The text is the policy's own chat format (user: prompt, assistant: answer) when the tokenizer has a
chat template, so the reward model reads completions as the policy writes them.

On disk a reward model is a folder: the backbone as a Hugging Face causal-LM folder (config.json,
model.safetensors, tokenizer files; loadable as a policy), the head in ``reward_head.safetensors``
and ``assay_reward_model.json`` (domain, base model, max length, text format). Long inputs are
truncated from the left: the answer's end, where the score is read, always stays.

It lives in generation/ (beside policy loading) because both quality/ (the reward gate) and
training/ (the trainer, GRPO rewards) load it. torch and transformers are imported lazily.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

HEAD_FILE = "reward_head.safetensors"
METADATA_FILE = "assay_reward_model.json"
DEFAULT_MAX_LENGTH = 512


class RewardModelError(ValueError):
    """A folder that is not a loadable reward model, with what to do."""


def format_text(tokenizer, prompt: str, answer: str) -> str:
    """``prompt`` and ``answer`` as one text in the tokenizer's chat format (plain when it has none)."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template([{"role": "user", "content": prompt},
                                              {"role": "assistant", "content": answer}], tokenize=False)
    return f"{prompt}\n{answer}"


def text_format(tokenizer) -> str:
    return "chat_template" if getattr(tokenizer, "chat_template", None) else "plain"


_NETWORK_CLASS = None


def _network_class():
    """The torch module class, defined on first use (torch is imported lazily)."""
    global _NETWORK_CLASS
    if _NETWORK_CLASS is not None:
        return _NETWORK_CLASS
    import torch

    class RewardNetwork(torch.nn.Module):
        """A causal LM's decoder + a linear head on the last non-pad token: one reward per sequence."""

        def __init__(self, backbone, head):
            super().__init__()
            self.backbone = backbone
            self.head = head

        def forward(self, input_ids, attention_mask):
            hidden = self.backbone.base_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
            last = (attention_mask.long() * positions).argmax(dim=1)  # the last real token, either padding side
            picked = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
            return self.head(picked.to(self.head.weight.dtype)).squeeze(-1)

    _NETWORK_CLASS = RewardNetwork
    return RewardNetwork


def load_tokenizer(folder: str | Path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "right"
    tokenizer.truncation_side = "left"  # keep the answer's end, where the reward is read
    return tokenizer


def new_network(base_folder: str | Path, *, seed: int = 0):
    """``(network, tokenizer)``: the causal LM at ``base_folder`` with a freshly drawn head (seeded),
    in float32 and train mode."""
    import torch
    from transformers import AutoModelForCausalLM

    tokenizer = load_tokenizer(base_folder)
    backbone = AutoModelForCausalLM.from_pretrained(base_folder, dtype=torch.float32, attn_implementation="sdpa")
    hidden = backbone.config.hidden_size
    head = torch.nn.Linear(hidden, 1)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        head.weight.copy_(torch.randn(head.weight.shape, generator=generator) / math.sqrt(hidden + 1))
        head.bias.zero_()
    network = _network_class()(backbone, head)
    network.train()
    return network, tokenizer


def encode(tokenizer, prompts: Sequence[str], answers: Sequence[str], max_length: int) -> dict[str, Any]:
    """Token tensors of each (prompt, answer) text, right-padded, truncated from the left."""
    texts = [format_text(tokenizer, p, a) for p, a in zip(prompts, answers, strict=True)]
    batch = tokenizer(texts, return_tensors="pt", padding=True, truncation=True, max_length=max_length,
                      add_special_tokens=False)
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}


def save_reward_model(network, tokenizer, folder: str | Path, metadata: dict) -> Path:
    """Write ``network`` as a reward-model folder (see the module docstring)."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    network.backbone.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    save_file({k: v.detach().contiguous().cpu() for k, v in network.head.state_dict().items()}, str(folder / HEAD_FILE))
    (folder / METADATA_FILE).write_text(json.dumps(metadata, indent=2, sort_keys=True))
    return folder


def read_metadata(folder: str | Path) -> dict:
    path = Path(folder) / METADATA_FILE
    if not path.exists():
        raise RewardModelError(f"{folder} is not a reward model folder (no {METADATA_FILE}): train one with "
                               "`assay reward train DOMAIN --pairs FILE`")
    return json.loads(path.read_text())


def load_network(folder: str | Path):
    """``(network, tokenizer, metadata)`` of a saved reward model, in eval mode."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    folder = Path(folder)
    metadata = read_metadata(folder)
    if not (folder / HEAD_FILE).exists() or not (folder / "config.json").exists():
        raise RewardModelError(f"reward model folder {folder} lacks {HEAD_FILE} or config.json: it was not saved "
                               "completely; train it again")
    tokenizer = load_tokenizer(folder)
    backbone = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa")
    head = torch.nn.Linear(backbone.config.hidden_size, 1)
    head.load_state_dict(load_file(str(folder / HEAD_FILE)))
    network = _network_class()(backbone, head)
    network.eval()
    return network, tokenizer, metadata


def score_texts(network, tokenizer, prompts: Sequence[str], answers: Sequence[str], *, max_length: int,
                batch_size: int = 16, autocast_bf16: bool = False) -> list[float]:
    """The network's reward for each (prompt, answer), without gradients, ``batch_size`` at a time
    (batches are sorted by length so padding stays small; results come back in input order), in
    bfloat16 autocast when asked (a model trained so is scored so: the gate and GRPO alike)."""
    import torch

    if len(prompts) != len(answers):
        raise ValueError(f"{len(prompts)} prompts but {len(answers)} answers: score them in pairs")
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]) + len(answers[i]))
    out: list[float] = [0.0] * len(prompts)
    was_training = network.training
    network.eval()
    try:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast_bf16):
            for start in range(0, len(order), batch_size):
                chunk = order[start:start + batch_size]
                batch = encode(tokenizer, [prompts[i] for i in chunk], [answers[i] for i in chunk], max_length)
                for i, value in zip(chunk, network(**batch).float().tolist()):
                    out[i] = float(value)
    finally:
        network.train(was_training)
    return out


@dataclass
class RewardScorer:
    """A loaded reward model: ``scorer(prompts, answers) -> [reward]`` (unbounded reals; only their
    order means something, as with any Bradley-Terry reward)."""

    network: Any
    tokenizer: Any
    metadata: dict
    batch_size: int = 16

    @classmethod
    def load(cls, folder: str | Path, batch_size: int = 16):
        """The scorer saved at ``folder``: a trained reward model, or a judge (:mod:`generation.judge`),
        both called as ``scorer(prompts, answers) -> [raw reward]``."""
        if read_metadata(folder).get("kind") == "judge":
            from generation.judge import JudgeScorer

            return JudgeScorer.load(folder, batch_size=min(batch_size, 8))
        network, tokenizer, metadata = load_network(folder)
        return cls(network, tokenizer, metadata, batch_size)

    @property
    def max_length(self) -> int:
        return int(self.metadata.get("max_length") or DEFAULT_MAX_LENGTH)

    @property
    def autocast_bf16(self) -> bool:
        """Whether to score in bfloat16 autocast: the model was trained so and this CPU computes bf16."""
        from generation.device import cpu_computes_bf16

        return bool(self.metadata.get("autocast_bf16")) and cpu_computes_bf16()

    def __call__(self, prompts: Sequence[str], answers: Sequence[str]) -> list[float]:
        return score_texts(self.network, self.tokenizer, list(prompts), list(answers), max_length=self.max_length,
                           batch_size=self.batch_size, autocast_bf16=self.autocast_bf16)
