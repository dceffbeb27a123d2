"""Variants of a checkpoint: the same policy made faster, kept as a checkpoint of its own.

A *variant* serves its parent checkpoint's policy through a faster path: quantized weights,
another runtime, or speculative decoding. Whether it is still the same policy is not assumed: it
is measured (:mod:`evaluation.variants`: speed against the parent, per-domain non-inferiority).
Here is what a variant *is* and how it is built and served.

Methods (``--method``), each through a maintained library:

- ``int8`` / ``int4``: weight-only quantization of every linear layer with torchao
  (``Int8WeightOnlyConfig``; ``Int4WeightOnlyConfig`` in its CPU packing), served by the project's
  torch engine; activations stay in the engine's dtype. torchao is opt-in (the ``torchao`` extra:
  transformers imports it on every model load once installed, with import warnings); 0.18 has no
  CPU int4 kernel, so ``int4`` says so and is refused where the torch engine runs on a CPU.
- ``gguf-q8_0`` / ``gguf-q4_0``: the checkpoint exported to GGUF and quantized by llama.cpp's own
  quantizer (:mod:`generation.gguf_export`), served by llama.cpp (:mod:`generation.llamacpp_engine`).
- ``spec-ngram``: prompt-lookup decoding (draft tokens copied from n-grams of the context) and
  ``spec-draft``: a small draft model proposes tokens; in both the target model verifies every
  token, so completions follow the target's distribution (token for token under greedy decoding,
  up to floating-point ties). Served by transformers' assisted generation
  (:mod:`generation.speculative_engine`). The default draft is the parent cut to its first quarter of
  layers (its embedding, final norm and head kept: a self-speculative draft that needs no second
  tokenizer); ``--draft`` names any policy with the same vocabulary instead.

On disk a variant is ``$ASSAY_HOME/checkpoints/<parent>--<method>/``: the parent's config and
tokenizer files (so prompts are formatted and tokenized exactly as the parent's are, and the
sweep's prompt-format key is the same), the method's artifact (the GGUF file, the draft folder),
and ``assay_variant.json`` (:class:`VariantManifest`). Int8/int4 weights are quantized from the
parent's weights when the engine loads (deterministic, seconds), so the folder holds no second
copy. The folder is built under a staging name and renamed into place.

:func:`variant_engine` is the one place that turns a variant folder into a generation engine;
:func:`generation.factory.make_engine` calls it for any variant folder, so sweeps, the speed
bench and the dashboard serve a variant like any checkpoint.
"""

from __future__ import annotations

import json
import shutil
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

MANIFEST = "assay_variant.json"
COPIED_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                "special_tokens_map.json", "chat_template.jinja")
DRAFT_FOLDER = "draft"
DRAFT_LAYER_FRACTION = 4     # the default draft keeps 1/4 of the parent's layers
PROMPT_LOOKUP_TOKENS = 10    # draft length of prompt lookup (transformers' documented default)


@dataclass(frozen=True)
class VariantMethod:
    name: str
    family: str       # torchao | gguf | speculative
    summary: str


METHODS: dict[str, VariantMethod] = {m.name: m for m in (
    VariantMethod("int8", "torchao", "int8 weight-only quantization (torchao), torch engine"),
    VariantMethod("int4", "torchao", "int4 weight-only quantization (torchao, CPU int4 layout), torch engine"),
    VariantMethod("gguf-q8_0", "gguf", "GGUF Q8_0 (llama.cpp quantizer), llama.cpp engine"),
    VariantMethod("gguf-q4_0", "gguf", "GGUF Q4_0 (llama.cpp quantizer), llama.cpp engine"),
    VariantMethod("spec-ngram", "speculative", "prompt-lookup speculative decoding, verified by the parent"),
    VariantMethod("spec-draft", "speculative", "draft-model speculative decoding, verified by the parent"),
)}


class VariantError(ValueError):
    """A variant that cannot be made or served (unknown method, missing library, bad draft)."""


class MethodUnavailable(VariantError):
    """The method cannot run on this machine (a library or kernel is missing); the message says why."""


def check_method(name: str) -> VariantMethod:
    if name not in METHODS:
        raise VariantError(f"unknown variant method {name!r}; known: {', '.join(METHODS)}")
    return METHODS[name]


def variant_id(parent: str, method: str) -> str:
    return f"{parent}--{method}"  # MLflow model names may not hold a dot


@dataclass
class VariantManifest:
    variant: str
    parent: str
    parent_path: str
    method: str
    created_at: str = ""
    artifact: str | None = None              # file or folder inside the variant folder
    options: dict[str, Any] = field(default_factory=dict)
    library: str | None = None               # the library (and version) that made/serves it

    @property
    def family(self) -> str:
        return METHODS[self.method].family


def read_manifest(folder: str | Path) -> VariantManifest | None:
    """The manifest of a variant folder, or None for an ordinary model folder."""
    path = Path(folder) / MANIFEST
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return VariantManifest(**{k: v for k, v in data.items() if k in VariantManifest.__dataclass_fields__})


# -- what this machine can run ---------------------------------------------------------------------

def _torchao_config(method: str):
    from torchao.quantization import Int4WeightOnlyConfig, Int8WeightOnlyConfig

    if method == "int8":
        return Int8WeightOnlyConfig()
    # the torch engine computes on the CPU: int4 needs torchao's CPU-packed int4 format (the probe in
    # unavailable_reason says when this torchao has no CPU kernel for it; 0.18 has none)
    return Int4WeightOnlyConfig(group_size=32, int4_packing_format="plain_int32")


def unavailable_reason(method: str) -> str | None:
    """Why ``method`` cannot run here (None: it can). Probed for real: a kernel that imports but
    fails on this CPU is unavailable too."""
    family = check_method(method).family
    if family == "gguf":
        try:
            import ik_llama_cpp  # noqa: F401
        except ImportError as exc:
            return f"ik-llama-cpp-python is not installed ({exc}): `pip install -e '.[variants]'` or `make install`"
        return None
    if family == "torchao":
        import importlib.util

        if importlib.util.find_spec("torchao") is None:
            return ("torchao is not installed; it is opt-in (`.venv/bin/pip install -e '.[torchao]'`): once installed, "
                    "transformers imports it on every model load and prints warnings; gguf-q8_0 is the default int8 path")
        try:
            import torch
            from torchao.quantization import quantize_

            layer = torch.nn.Sequential(torch.nn.Linear(128, 64, bias=False))
            quantize_(layer, _torchao_config(method))
            layer(torch.randn(2, 128))
        except Exception as exc:  # noqa: BLE001 - any failure means: no kernel for this method here
            return f"torchao {method} does not run on this machine: {type(exc).__name__}: {str(exc)[:200]}"
        return None
    return None


# -- making a variant ----------------------------------------------------------------------------

def _copy_model_files(parent: Path, dest: Path) -> None:
    for name in COPIED_FILES:
        if (parent / name).exists():
            shutil.copy2(parent / name, dest / name)


def build_draft(parent_path: str | Path, dest: Path, layers: int | None = None) -> int:
    """Save the parent cut to its first ``layers`` decoder layers (default a quarter) as a model
    folder at ``dest``; returns the number of layers kept."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(parent_path, dtype=torch.float32)
    total = model.config.num_hidden_layers
    keep = layers or max(1, total // DRAFT_LAYER_FRACTION)
    if not 1 <= keep < total:
        raise VariantError(f"a draft must keep between 1 and {total - 1} of the parent's {total} layers, got {keep}")
    model.model.layers = model.model.layers[:keep]
    model.config.num_hidden_layers = keep
    if getattr(model.config, "layer_types", None):
        model.config.layer_types = model.config.layer_types[:keep]
    model.save_pretrained(dest, safe_serialization=True)
    AutoTokenizer.from_pretrained(parent_path).save_pretrained(dest)
    return keep


def check_draft_vocabulary(parent_path: str | Path, draft_path: str | Path) -> None:
    """A draft proposes token ids the target verifies: both must mean the same ids."""
    parent_vocab = json.loads((Path(parent_path) / "tokenizer.json").read_text())["model"]["vocab"]
    draft_file = Path(draft_path) / "tokenizer.json"
    if not draft_file.exists():
        raise VariantError(f"draft {draft_path} has no tokenizer.json: a draft must share the parent's tokenizer")
    if json.loads(draft_file.read_text())["model"]["vocab"] != parent_vocab:
        raise VariantError(f"draft {draft_path} has a different vocabulary than the parent: speculative decoding "
                           "needs the same token ids on both sides; pick a draft trained from the same tokenizer")


def make_variant(parent: str, parent_path: str | Path, method: str, checkpoints_dir: str | Path, *,
                 draft: str | Path | None = None, draft_layers: int | None = None,
                 log=lambda message: None) -> Path:
    """Build variant ``<parent>--<method>`` of the model folder ``parent_path`` under
    ``checkpoints_dir``; returns its folder (an existing one is returned as is)."""
    check_method(method)
    problem = unavailable_reason(method)
    if problem:
        raise MethodUnavailable(problem)
    if draft is not None and method != "spec-draft":
        raise VariantError("--draft only applies to --method spec-draft")
    parent_path = Path(parent_path)
    name = variant_id(parent, method)
    final = Path(checkpoints_dir) / name
    if (final / MANIFEST).exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = final.parent / f".staging-{name}-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    try:
        _copy_model_files(parent_path, staging)
        manifest = VariantManifest(variant=name, parent=parent, parent_path=str(parent_path.resolve()),
                                   method=method, created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        family = METHODS[method].family
        if family == "gguf":
            from generation.gguf_export import export_gguf

            quant = method.removeprefix("gguf-")
            manifest.artifact = f"model.{quant}.gguf"
            log(f"exporting {parent} to GGUF {quant} ...")
            export_gguf(parent_path, staging / manifest.artifact, quant=quant)
            import ik_llama_cpp

            manifest.library = f"ik-llama-cpp-python {ik_llama_cpp.__version__}"
        elif family == "torchao":
            import torchao

            manifest.library = f"torchao {torchao.__version__}"
        elif method == "spec-draft":
            import transformers

            manifest.library = f"transformers {transformers.__version__}"
            if draft is not None:
                from generation.policy import policy_path

                draft_dir = policy_path(str(draft))
                check_draft_vocabulary(parent_path, draft_dir)
                manifest.artifact = str(draft_dir)
                manifest.options["draft"] = str(draft)
            else:
                kept = build_draft(parent_path, staging / DRAFT_FOLDER, draft_layers)
                manifest.artifact = DRAFT_FOLDER
                manifest.options["draft_layers"] = kept
                log(f"draft: the parent's first {kept} layers")
        else:
            import transformers

            manifest.library = f"transformers {transformers.__version__}"
            manifest.options["prompt_lookup_num_tokens"] = PROMPT_LOOKUP_TOKENS
        (staging / MANIFEST).write_text(json.dumps(asdict(manifest), indent=2))
        from generation.policy import publish_folder

        return publish_folder(staging, final, marker=MANIFEST)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# -- serving a variant -------------------------------------------------------------------------------

def artifact_path(folder: Path, manifest: VariantManifest) -> Path:
    path = Path(manifest.artifact)
    return path if path.is_absolute() else folder / path


def variant_engine(folder: str | Path, manifest: VariantManifest, **options: Any):
    """The generation engine that serves a variant. Options the method has no use for (vLLM
    memory settings, a backend's batch sizes) are ignored; ``dtype``, ``threads`` and ``home``
    apply where they mean something."""
    import torch

    folder = Path(folder)
    if manifest.method not in METHODS:
        raise VariantError(f"variant {manifest.variant} names unknown method {manifest.method!r}")
    problem = unavailable_reason(manifest.method)
    if problem:
        raise MethodUnavailable(f"variant {manifest.variant} cannot be served here: {problem}")
    if options.get("threads"):
        torch.set_num_threads(int(options["threads"]))
    family = manifest.family
    if family == "gguf":
        from generation.llamacpp_engine import LlamaCppEngine

        return LlamaCppEngine(artifact_path(folder, manifest), folder, threads=torch.get_num_threads(),
                              policy_ref=manifest.variant)
    from generation.policy import load_policy

    dtype = options.get("dtype", "float32")
    model, tokenizer = load_policy(manifest.parent_path, dtype=dtype, home=options.get("home"))
    if family == "torchao":
        from torchao.quantization import quantize_

        from generation.torch_engine import DEFAULT_MAX_BATCH_TOKENS, TorchEngine

        quantize_(model, _torchao_config(manifest.method))
        engine = TorchEngine(model, tokenizer, max_batch_size=int(options.get("max_batch_size", 64)),
                             max_batch_tokens=int(options.get("max_batch_tokens", DEFAULT_MAX_BATCH_TOKENS)),
                             policy_ref=manifest.variant)
        engine.label = manifest.method
        return engine
    from generation.speculative_engine import SpeculativeEngine

    draft_model = None
    if manifest.method == "spec-draft":
        draft_model, _ = load_policy(str(artifact_path(folder, manifest)), dtype=dtype, home=options.get("home"))
    return SpeculativeEngine(model, tokenizer, draft_model=draft_model,
                             prompt_lookup_num_tokens=manifest.options.get("prompt_lookup_num_tokens"),
                             policy_ref=manifest.variant, label=manifest.method)
