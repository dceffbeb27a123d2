"""Chat-prompt formatting: the one place a sample's prompt becomes what the policy reads.

A sample's ``prompt`` is the user's turn. When the tokenizer has a chat template, the prompt the
model reads is that template applied to one user message plus the generation prompt
(:func:`chat_prompt`); without one it goes to the model as it is ("raw"). The text is then
tokenized without special tokens (:func:`encode_prompt`): the template already holds the ones the
model expects.

Every caller goes through here: the GRPO trainer's rollouts (:func:`prompt_ids`), both generation
engines (``format_prompt`` and ``encode``), and the sweep cache key, the *prompt format*
(``"raw"`` or ``"chat:<12 hex>"``, a hash of the template; :func:`prompt_format_of_tokenizer`, and
:func:`prompt_format_of_folder`, which reads it from a model folder's tokenizer files without
loading anything). The format hashes :func:`chat_template_in_use`, the very template
:func:`chat_prompt` passes to ``apply_chat_template``, so a sweep's key and the formatting it names
cannot describe two different templates; ``tests/training/test_prompts.py`` also checks that
trainer rollouts and engine sweeps give the same prompt token ids for the same row.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

RAW_PROMPT = "raw"


def _one_template(chat_template: Any) -> str | None:
    """The template that applies: named templates use ``"default"`` (as ``apply_chat_template``
    does); None when there is none (raw prompts)."""
    if isinstance(chat_template, dict):
        if chat_template and "default" not in chat_template:
            raise ValueError(f"the tokenizer has named chat templates {sorted(chat_template)} but no 'default': "
                             "add a 'default' template to the model's tokenizer files")
        chat_template = chat_template.get("default")
    return str(chat_template) if chat_template else None


def chat_template_in_use(tokenizer) -> str | None:
    """The chat template :func:`chat_prompt` applies with this tokenizer (None: raw prompts)."""
    return _one_template(getattr(tokenizer, "chat_template", None))


def chat_prompt(tokenizer, user_text: str) -> str:
    """``user_text`` as the model reads it: the chat template applied to one user turn plus the
    generation prompt, or the text itself when the tokenizer has no template."""
    template = chat_template_in_use(tokenizer)
    if template is None:
        return user_text
    return tokenizer.apply_chat_template([{"role": "user", "content": user_text}], chat_template=template,
                                         tokenize=False, add_generation_prompt=True)


def chat_messages_prompt(tokenizer, messages: list[dict]) -> str:
    """A whole conversation (``[{"role", "content"}, ...]``) as the model reads it, ending with the
    generation prompt of the next assistant turn; without a chat template, ``role: content`` lines."""
    template = chat_template_in_use(tokenizer)
    if template is None:
        return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "
    return tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False, add_generation_prompt=True)


def encode_prompt(tokenizer, formatted: str) -> list[int]:
    """Token ids of a prompt already formatted by :func:`chat_prompt` (no special tokens added twice)."""
    return list(tokenizer(formatted, add_special_tokens=False).input_ids)


def prompt_ids(tokenizer, user_text: str) -> list[int]:
    """Token ids of ``user_text`` as the model reads it: :func:`encode_prompt` of :func:`chat_prompt`."""
    return encode_prompt(tokenizer, chat_prompt(tokenizer, user_text))


# -- the prompt format: an identity for sweep cache keys ------------------------------------------


def prompt_format_id(chat_template: Any) -> str:
    """``"raw"`` (no template: prompts go to the model as they are) or ``"chat:<12 hex>"``, a hash
    of the template :func:`chat_prompt` applies (named templates: their ``"default"``)."""
    template = _one_template(chat_template)
    if template is None:
        return RAW_PROMPT
    return "chat:" + hashlib.sha256(template.encode()).hexdigest()[:12]


def prompt_format_of_tokenizer(tokenizer) -> str:
    """The prompt format of what :func:`chat_prompt` does with this tokenizer."""
    return prompt_format_id(chat_template_in_use(tokenizer))


def prompt_format_of_folder(path) -> str:
    """The prompt format of a Hugging Face model folder, read from its tokenizer files without
    loading anything (so a fully cached sweep still never loads the model): ``chat_template.jinja``,
    else ``chat_template`` in ``tokenizer_config.json`` (a string or named templates), else
    ``chat_template.json``; none means raw prompts. An engine built on the folder is checked
    against it (:func:`prompt_format_of_tokenizer`) before a sweep uses it."""
    folder = Path(path)
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return prompt_format_id(jinja.read_text())
    for name in ("tokenizer_config.json", "chat_template.json"):
        file = folder / name
        if not file.is_file():
            continue
        template = json.loads(file.read_text()).get("chat_template")
        if isinstance(template, list):  # [{"name": ..., "template": ...}]
            template = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        if template:
            return prompt_format_id(template)
    return RAW_PROMPT


class TokenizerPrompts:
    """What every engine does to prompts through its Hugging Face ``tokenizer``: format them
    (:func:`chat_prompt`), encode them (:func:`encode_prompt`) and name the format for the sweep's
    cache key. Engines inherit it, so prompts reach every engine as the same token ids."""

    tokenizer: Any

    @property
    def prompt_format(self) -> str:
        """What :meth:`format_prompt` does, as a sweep cache key."""
        return prompt_format_of_tokenizer(self.tokenizer)

    def format_prompt(self, user_text: str) -> str:
        return chat_prompt(self.tokenizer, user_text)

    def encode(self, prompts) -> list[list[int]]:
        """Token ids of prompts already formatted by :meth:`format_prompt`."""
        return [encode_prompt(self.tokenizer, p) for p in prompts]


def prompt_format_of_engine(engine) -> str | None:
    """The prompt format of an engine: its ``prompt_format`` when it declares one, else that of its
    tokenizer; None when it has neither to ask."""
    declared = getattr(engine, "prompt_format", None)
    if declared:
        return declared
    tokenizer = getattr(engine, "tokenizer", None)
    return None if tokenizer is None else prompt_format_of_tokenizer(tokenizer)
