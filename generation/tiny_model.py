"""The tiny test policy: a byte-level BPE tokenizer and a ~0.5M-parameter Llama, built locally.

Tests need a real causal LM with a real tokenizer that loads in milliseconds and trains in
fractions of a second, without downloading anything. The tokenizer is trained with
``tokenizers`` on text that is on this machine (the docstrings of standard-library modules plus
arithmetic strings, so numbers tokenize sensibly); the model is a randomly initialised
``LlamaForCausalLM`` (seeded, so every build is the same). It carries a minimal chat template so
the chat-template path of the generation engine is exercised too.
"""

from __future__ import annotations

import importlib
import random
from pathlib import Path

VOCAB_SIZE = 512
SPECIAL_TOKENS = ("<|endoftext|>", "<|pad|>")
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)
_CORPUS_MODULES = ("json", "textwrap", "collections", "functools", "itertools", "pathlib", "random",
                   "string", "re", "statistics", "fractions", "decimal", "argparse", "csv")
SEED = 1234


def local_corpus() -> list[str]:
    """Text found on this machine: stdlib docstrings plus seeded arithmetic lines."""
    lines: list[str] = []
    for name in _CORPUS_MODULES:
        module = importlib.import_module(name)
        for obj in [module, *vars(module).values()]:
            doc = getattr(obj, "__doc__", None)
            if isinstance(doc, str):
                lines.extend(line.strip() for line in doc.splitlines() if line.strip())
    rng = random.Random(SEED)
    for _ in range(2000):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        lines.append(f"What is {a} + {b}? The answer is {a + b}.")
    return lines


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    core.train_from_iterator(local_corpus(), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token=SPECIAL_TOKENS[0],
                                        pad_token=SPECIAL_TOKENS[1], bos_token=SPECIAL_TOKENS[0])
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_policy(folder: str | Path) -> Path:
    """Write the tiny tokenizer + model as a Hugging Face folder at ``folder``."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    folder = Path(folder)
    tokenizer = build_tokenizer()
    # head_dim 32: the smallest head size vLLM's CPU attention kernels take (96 / 4 = 24 is not
    # one), so the tiny policy runs in both generation engines
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=96, intermediate_size=256, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=1024,
        tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config)
    check_initialised(model, config.initializer_range)
    model.generation_config = GenerationConfig(bos_token_id=tokenizer.bos_token_id,
                                               eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def check_initialised(model, std: float) -> None:
    """Refuse a model whose initialisation was skipped. Constructing a model obeys process-wide
    patches (transformers' ``no_init_weights`` while another thread loads a model, a live DeepSpeed
    ZeRO-3 ``Init``): its weights are then whatever memory held, NaN or noise, and a test policy
    built so trains into nonsense that fails far from here. Every matrix must be finite with a
    standard deviation near the configured one."""
    for name, parameter in model.named_parameters():
        if parameter.dim() != 2:
            continue
        observed = float(parameter.detach().float().std())
        if not 0.5 * std <= observed <= 2 * std:  # NaN fails both comparisons
            raise RuntimeError(f"tiny policy: {name} was not initialised (std {observed:.4g}, expected ~{std}): "
                               "build it in a fresh process (python -m generation.tiny_model FOLDER)")


if __name__ == "__main__":  # python -m generation.tiny_model FOLDER: what generation.policy.ensure_tiny runs
    import sys

    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m generation.tiny_model FOLDER")
    print(build_tiny_policy(sys.argv[1]))
