"""One chat-prompt formatting (generation.prompts) for GRPO rollouts, both engines and the sweep key."""

from __future__ import annotations

import json
import shutil

import pytest

from generation.prompts import (RAW_PROMPT, chat_prompt, chat_template_in_use, prompt_format_id,
                              prompt_format_of_folder, prompt_format_of_tokenizer, prompt_ids)

ROWS = [{"id": "r0", "prompt": "What is 17 + 25?", "answer": "42"},
        {"id": "r1", "prompt": "Write a haiku about rain.\nThen say: done.", "answer": "done"},
        {"id": "r2", "prompt": "  spaces,\ttabs and unicode: café, 東京  ", "answer": "x"}]


def _trainer_rollout_prompt_ids(tokenizer, model, rows: list[dict]) -> list[list[int]]:
    """The prompt ids of the rollouts the real GRPOTrainer samples for ``rows`` (one step)."""
    from types import SimpleNamespace

    from pipelines.settings import open_lake
    from training.config import load_recipe
    from training.mixture import Pick
    from training.trainer import GRPOTrainer

    config = load_recipe("tiny", num_generations=2, max_completion_length=2, prompts_per_step=len(rows))
    trainer = GRPOTrainer(config, open_lake(), open_lake().mlflow_uri)
    trainer.rank, trainer.world, trainer.tokenizer = 0, 1, tokenizer
    from training.rollout_engine import TorchRollouts

    engine = SimpleNamespace(module=model)  # the rollout model is the policy itself: nothing to sync
    rollouts, _ = trainer._rollouts(0, [Pick("d", row) for row in rows], TorchRollouts(engine, config, tokenizer))
    by_group = {r.group: r.prompt_ids for r in rollouts}
    assert len(rollouts) == 2 * len(rows)
    return [by_group[g] for g in range(len(rows))]


def test_trainer_rollouts_and_engine_sweeps_give_the_same_prompt_token_ids(tiny_home):
    from generation.factory import make_engine
    from generation.vllm_engine import VllmEngine

    engine = make_engine("tiny", home=str(tiny_home), dtype="float32")
    rollout_ids = _trainer_rollout_prompt_ids(engine.tokenizer, engine.model, ROWS)
    # what a sweep sends: engine.format_prompt(item["prompt"]), then the engine's own tokenization
    torch_ids = engine.encode([engine.format_prompt(row["prompt"]) for row in ROWS])
    # the vLLM engine's prompt path, on the same tokenizer (its LLM is not needed to format prompts)
    vllm = VllmEngine.__new__(VllmEngine)
    vllm.tokenizer = engine.tokenizer
    vllm_ids = vllm.encode([vllm.format_prompt(row["prompt"]) for row in ROWS])
    assert rollout_ids == torch_ids == vllm_ids
    assert all(ids == prompt_ids(engine.tokenizer, row["prompt"]) for ids, row in zip(rollout_ids, ROWS))
    text = engine.tokenizer.decode(rollout_ids[0])
    assert text == "user: What is 17 + 25?\nassistant:"  # the tiny chat template, applied once
    # and the sweep's cache key names that very formatting, from the folder and from the engines
    assert prompt_format_of_folder(tiny_home / "models" / "tiny") == engine.prompt_format == vllm.prompt_format
    assert engine.prompt_format == prompt_format_id(chat_template_in_use(engine.tokenizer)) != RAW_PROMPT


def test_the_prompt_format_follows_the_template_the_formatting_applies(tiny_home):
    from generation.policy import load_tokenizer

    tokenizer = load_tokenizer("tiny", tiny_home)
    original = prompt_format_of_tokenizer(tokenizer)
    assert original.startswith("chat:") and chat_prompt(tokenizer, "hi") == "user: hi\nassistant:"

    tokenizer.chat_template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}<bot>"
    assert chat_prompt(tokenizer, "hi") == "<user>hi<bot>"
    assert prompt_format_of_tokenizer(tokenizer) not in (original, RAW_PROMPT)

    # named templates: the "default" one is applied and named; none named "default" is refused
    tokenizer.chat_template = {"default": "D:{{ messages[0]['content'] }}",
                               "tool_use": "T:{{ messages[0]['content'] }}"}
    assert chat_prompt(tokenizer, "hi") == "D:hi"
    assert prompt_format_of_tokenizer(tokenizer) == prompt_format_id("D:{{ messages[0]['content'] }}")
    tokenizer.chat_template = {"tool_use": "T:{{ messages[0]['content'] }}"}
    with pytest.raises(ValueError, match=r"named chat templates \['tool_use'\] but no 'default'"):
        chat_prompt(tokenizer, "hi")
    with pytest.raises(ValueError, match="no 'default'"):
        prompt_format_of_tokenizer(tokenizer)

    # no template: the prompt goes as it is, and the format says raw
    tokenizer.chat_template = None
    assert chat_prompt(tokenizer, "hi") == "hi" and prompt_format_of_tokenizer(tokenizer) == RAW_PROMPT
    assert prompt_ids(tokenizer, "What is 1 + 2?") == tokenizer("What is 1 + 2?", add_special_tokens=False).input_ids


def test_the_folder_format_is_the_format_of_the_tokenizer_loaded_from_it(tiny_home, tmp_path):
    """Read from the files without loading (sweeps key a fully cached re-run on it) and from the
    loaded tokenizer (what the engine then checks): the same answer for each way of storing it."""
    from generation.policy import load_tokenizer

    source = tiny_home / "models" / "tiny"
    template = "{% for m in messages %}[{{ m['content'] }}]{% endfor %}>"
    jinja, config_only, none = (tmp_path / name for name in ("jinja", "config_only", "none"))
    for folder in (jinja, config_only, none):
        shutil.copytree(source, folder)
        (folder / "chat_template.jinja").unlink(missing_ok=True)
        config = json.loads((folder / "tokenizer_config.json").read_text())
        config.pop("chat_template", None)
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (jinja / "chat_template.jinja").write_text(template)
    config = json.loads((config_only / "tokenizer_config.json").read_text())
    (config_only / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": template}))
    for folder, expected in ((jinja, prompt_format_id(template)), (config_only, prompt_format_id(template)),
                             (none, RAW_PROMPT)):
        loaded = load_tokenizer(str(folder))
        assert prompt_format_of_folder(folder) == prompt_format_of_tokenizer(loaded) == expected, folder.name
    assert chat_prompt(load_tokenizer(str(jinja)), "hi") == "[hi]>"
