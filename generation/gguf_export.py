"""GGUF export: a Hugging Face Llama checkpoint as a llama.cpp model file, plain or quantized.

A *variant* of a policy checkpoint (``gguf-q8_0``, ``gguf-q4_0``) is the same weights served by
llama.cpp (:mod:`generation.llamacpp_engine`) at lower precision: what a deployment would run. The
file is built here, not by llama.cpp's conversion script (not installed, and it tracks
llama.cpp's main branch): ``export_gguf(model_dir, out_path, quant=...)`` writes

- ``f32`` / ``f16``: the tensors with the ``gguf`` package's :class:`gguf.GGUFWriter` (2-D weights
  in f16 for ``f16``; norms stay f32, as llama.cpp expects);
- ``q8_0`` / ``q4_0``: that f32 file to a temporary path, then llama.cpp's own quantizer (the
  ``llama-quantize`` binary of the prebuilt ``ik-llama-cpp-python`` wheel, which compiles nothing at
  install; its bindings do not wrap ``llama_model_quantize``), so the quantized blocks (and its choice of type per tensor,
  e.g. a tied embedding kept at higher precision) are exactly what llama.cpp would produce.

What a llama-arch GGUF must hold, and how a Hugging Face folder maps onto it:

- hyperparameters from ``config.json`` (context / embedding / feed-forward lengths, block count,
  head counts, head size, RoPE base and dimension count, RMS-norm epsilon, vocabulary size) plus
  the file type. The head size is written explicitly: the tiny test policy's heads (32) are not
  ``hidden_size / heads`` (24), and llama.cpp would assume the latter;
- tensors under llama.cpp's names (``gguf.get_tensor_name_map``). Hugging Face Llama checkpoints
  rotate the two *halves* of each query/key head (``rotate_half``); llama.cpp's Llama RoPE rotates
  *adjacent pairs*. The query and key rows of every head are therefore reordered
  (:func:`rope_pairs_layout`): same attention scores, llama.cpp's layout. A tied output head is
  not written (llama.cpp reuses ``token_embd`` when ``output.weight`` is absent);
- the tokenizer: ``tokenizer.json``'s byte-level BPE as llama.cpp's ``gpt2`` model, its tokens in
  id order (added special tokens typed CONTROL, other added tokens USER_DEFINED, ids the embedding
  has but the tokenizer lacks padded as UNUSED), its merges, the pre-tokenizer's name
  (:data:`PRE_TOKENIZERS`), bos/eos/pad/unk ids, whether a BOS is prepended, and the chat template
  the project's prompts use (:mod:`generation.prompts`).

Only what the project's policies are is accepted (Llama, byte-level BPE, plain RoPE, no biases):
anything else fails with the reason, not with a file llama.cpp would load and run wrongly. Files
appear at ``out_path`` by one rename, never half written. :func:`gguf_quant_of` reads the file
type back (provenance of a variant).
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from pathlib import Path
from typing import Any, Iterator

GGUF_QUANTS = ("f32", "f16", "q8_0", "q4_0")
"""The quantizations :func:`export_gguf` writes (``q8_0``/``q4_0`` through llama.cpp's quantizer)."""

# llama.cpp's file types (enum llama_ftype, mirrored by gguf.LlamaFileType) of the quants above
_FILE_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 7}

PRE_TOKENIZERS: dict[str, str] = {
    "ByteLevel": "gpt-2",
    "Digits+ByteLevel": "smollm",
}
"""llama.cpp's pre-tokenizer name for each ``tokenizer.json`` pre-tokenizer layout this exporter
recognises (byte-level, with the GPT-2 split regex; SmolLM2's original tokenizer puts each digit
apart first). The project's SmolLM2 copy is converted from a GGUF by transformers and is plain
byte-level, so its export says ``gpt-2``: llama.cpp then splits text as that tokenizer does."""


class GGUFExportError(ValueError):
    """A model folder this exporter cannot turn into a correct llama.cpp file."""


def export_gguf(model_dir: str | os.PathLike, out_path: str | os.PathLike, *, quant: str) -> Path:
    """Write the Hugging Face Llama folder ``model_dir`` as a GGUF file at ``out_path`` in ``quant``
    (one of :data:`GGUF_QUANTS`); returns ``out_path``. Written under a staging name in the same
    folder and renamed into place."""
    if quant not in GGUF_QUANTS:
        raise GGUFExportError(f"unknown GGUF quantization {quant!r}: use one of {', '.join(GGUF_QUANTS)}")
    model_dir, out_path = Path(model_dir), Path(out_path)
    config = _llama_config(model_dir)
    tokenizer = _tokenizer_metadata(model_dir, config["vocab_size"])
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with _scratch(out_path, "staging") as staging:
        if quant in ("f32", "f16"):
            _write_gguf(model_dir, config, tokenizer, staging, quant)
        else:
            with _scratch(out_path, "f32") as full:
                _write_gguf(model_dir, config, tokenizer, full, "f32")
                _quantize(full, staging, quant)
        os.replace(staging, out_path)
    return out_path


def gguf_quant_of(path: str | os.PathLike) -> str:
    """The quantization a GGUF file declares (``general.file_type``): ``f32``, ``f16``, ``q8_0``,
    ``q4_0``, or llama.cpp's name for another (``q4_1``, ``q4_k_m``, ...)."""
    import gguf

    value = _header_value(Path(path), gguf.Keys.General.FILE_TYPE)
    if value is None:
        raise GGUFExportError(f"{path} declares no {gguf.Keys.General.FILE_TYPE}: re-export it with export_gguf")
    for name, file_type in _FILE_TYPES.items():
        if file_type == value:
            return name
    try:
        return gguf.LlamaFileType(value).name.lower().removeprefix("mostly_").removeprefix("all_")
    except ValueError:
        return f"ftype-{value}"


def _header_value(path: Path, wanted: str) -> Any:
    """One scalar of a GGUF file's metadata, read from its header alone. (``gguf.GGUFReader``
    parses every field, the 49k-token vocabulary included: ~5 s for SmolLM2, where this takes ms.)"""
    import struct

    from gguf import GGUFValueType as V

    scalars = {V.UINT8: "B", V.INT8: "b", V.UINT16: "H", V.INT16: "h", V.UINT32: "I", V.INT32: "i",
               V.FLOAT32: "f", V.BOOL: "?", V.UINT64: "Q", V.INT64: "q", V.FLOAT64: "d"}

    def read(fmt: str):
        return struct.unpack("<" + fmt, handle.read(struct.calcsize("<" + fmt)))[0]

    def skip(vtype: V) -> None:
        if vtype in scalars:
            handle.seek(struct.calcsize(scalars[vtype]), 1)
        elif vtype == V.STRING:
            handle.seek(read("Q"), 1)
        elif vtype == V.ARRAY:
            item, count = V(read("I")), read("Q")
            if item in scalars:
                handle.seek(count * struct.calcsize(scalars[item]), 1)
            else:
                for _ in range(count):
                    skip(item)
        else:
            raise GGUFExportError(f"{path}: unknown GGUF value type {vtype!r}")

    with open(path, "rb") as handle:
        if handle.read(4) != b"GGUF":
            raise GGUFExportError(f"{path} is not a GGUF file")
        version = read("I")
        read("Q")  # tensor count
        fields = read("Q")
        if version < 2:
            raise GGUFExportError(f"{path} is GGUF version {version}; only version 2 and later are read")
        for _ in range(fields):
            key = handle.read(read("Q")).decode("utf-8")
            vtype = V(read("I"))
            if key == wanted and vtype in scalars:
                return read(scalars[vtype])
            skip(vtype)
    return None


# -- what is read from the folder ----------------------------------------------------------------


def _llama_config(model_dir: Path) -> dict[str, Any]:
    """``config.json``, checked to be a Llama this exporter writes correctly."""
    file = model_dir / "config.json"
    if not file.is_file():
        raise GGUFExportError(f"{model_dir} has no config.json: point at a Hugging Face model folder")
    config = json.loads(file.read_text())
    architectures = config.get("architectures") or []
    if config.get("model_type") != "llama" or any(a != "LlamaForCausalLM" for a in architectures):
        raise GGUFExportError(
            f"{model_dir} holds a {config.get('model_type')!r} model "
            f"({', '.join(architectures) or 'no architectures'}): GGUF export supports Llama checkpoints "
            "(model_type 'llama', LlamaForCausalLM) only")
    if config.get("attention_bias") or config.get("mlp_bias"):
        raise GGUFExportError(f"{model_dir}: Llama with attention/MLP biases is not supported by this exporter")
    if config.get("hidden_act", "silu") != "silu":
        raise GGUFExportError(f"{model_dir}: hidden_act {config['hidden_act']!r}; llama.cpp's Llama uses silu")
    rope = config.get("rope_parameters") or {}
    scaling = config.get("rope_scaling") or {}
    rope_type = rope.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    if rope_type != "default":
        raise GGUFExportError(f"{model_dir}: RoPE scaling {rope_type!r} is not exported; export the unscaled model "
                              "(llama.cpp takes a RoPE scaling at load time)")
    heads = config["num_attention_heads"]
    return {
        "vocab_size": config["vocab_size"],
        "context_length": config.get("max_position_embeddings", 2048),
        "hidden_size": config["hidden_size"],
        "intermediate_size": config["intermediate_size"],
        "layers": config["num_hidden_layers"],
        "heads": heads,
        "kv_heads": config.get("num_key_value_heads") or heads,
        "head_dim": config.get("head_dim") or config["hidden_size"] // heads,
        "rope_theta": float(rope.get("rope_theta", config.get("rope_theta", 10000.0))),
        "rms_eps": float(config.get("rms_norm_eps", 1e-6)),
        "tied": bool(config.get("tie_word_embeddings", False)),
        "name": model_dir.resolve().name,
        "ids": {key: config.get(f"{key}_token_id") for key in ("bos", "eos", "pad", "unk")},
    }


def _pre_tokenizer_layout(pre: dict | None) -> str:
    if not pre:
        return "none"
    if pre.get("type") == "Sequence":
        return "+".join(_pre_tokenizer_layout(p) for p in pre.get("pretokenizers", []))
    if pre.get("type") == "ByteLevel" and not pre.get("use_regex", True):
        return "ByteLevel(no regex)"
    if pre.get("type") == "Digits" and not pre.get("individual_digits", False):
        return "Digits(grouped)"
    return str(pre.get("type"))


def _token_content(value: Any) -> str | None:
    """A special token as ``tokenizer_config.json`` gives it (a string, or an AddedToken dict)."""
    return value.get("content") if isinstance(value, dict) else value


def _chat_template(model_dir: Path) -> str | None:
    """The chat template :mod:`generation.prompts` applies, from the same files in the same order
    (``chat_template.jinja``, then ``tokenizer_config.json``, then ``chat_template.json``; named
    templates: their ``default``)."""
    jinja = model_dir / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text()
    for name in ("tokenizer_config.json", "chat_template.json"):
        file = model_dir / name
        if file.is_file():
            template = json.loads(file.read_text()).get("chat_template")
            if isinstance(template, list):
                template = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            if isinstance(template, dict):
                template = template.get("default")
            if template:
                return str(template)
    return None


def _tokenizer_metadata(model_dir: Path, vocab_size: int) -> dict[str, Any]:
    """Tokens (id order), token types, merges, pre-tokenizer, special ids, add-BOS flag and chat
    template, read from the folder's tokenizer files (nothing is loaded)."""
    import gguf

    file = model_dir / "tokenizer.json"
    if not file.is_file():
        raise GGUFExportError(f"{model_dir} has no tokenizer.json: GGUF export needs the fast (tokenizers) "
                              "tokenizer; save it with `AutoTokenizer.from_pretrained(...).save_pretrained(folder)`")
    spec = json.loads(file.read_text())
    model = spec.get("model") or {}
    decoder = (spec.get("decoder") or {}).get("type")
    if model.get("type") != "BPE" or decoder != "ByteLevel":
        raise GGUFExportError(f"{file}: a {model.get('type')} tokenizer with a {decoder} decoder; GGUF export "
                              "supports byte-level BPE tokenizers (llama.cpp's 'gpt2' model) only")
    layout = _pre_tokenizer_layout(spec.get("pre_tokenizer"))
    if layout not in PRE_TOKENIZERS:
        raise GGUFExportError(f"{file}: pre-tokenizer {layout} has no llama.cpp counterpart here "
                              f"(known: {', '.join(PRE_TOKENIZERS)}); add it to PRE_TOKENIZERS")
    by_id: dict[int, tuple[str, int]] = {i: (text, gguf.TokenType.NORMAL) for text, i in model["vocab"].items()}
    for added in spec.get("added_tokens", []):
        by_id[added["id"]] = (added["content"],
                              gguf.TokenType.CONTROL if added.get("special") else gguf.TokenType.USER_DEFINED)
    if max(by_id) >= vocab_size:
        raise GGUFExportError(f"{file} has token id {max(by_id)} but the model's embedding has {vocab_size} rows: "
                              "the tokenizer does not belong to this model")
    tokens, types = [], []
    for i in range(vocab_size):  # rows of the embedding no token uses: named, never produced
        text, kind = by_id.get(i, (f"[PAD{i}]", gguf.TokenType.UNUSED))
        tokens.append(text)
        types.append(int(kind))
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    ids = {text: i for i, (text, _) in by_id.items()}
    config_file = model_dir / "tokenizer_config.json"
    tok_config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    special = {}
    for key in ("bos", "eos", "pad", "unk"):
        special[key] = ids.get(_token_content(tok_config.get(f"{key}_token")))
    single = ((spec.get("post_processor") or {}).get("single") or [])
    add_bos = bool(single) and "SpecialToken" in single[0]
    add_eos = len(single) > 1 and "SpecialToken" in single[-1]
    return {"tokens": tokens, "types": types, "merges": merges, "pre": PRE_TOKENIZERS[layout],
            "special": special, "add_bos": add_bos or bool(tok_config.get("add_bos_token")),
            "add_eos": add_eos or bool(tok_config.get("add_eos_token")), "chat_template": _chat_template(model_dir)}


def _safetensors(model_dir: Path) -> Iterator[tuple[str, Any]]:
    """``(name, float32 numpy array)`` of every stored tensor, one at a time (bf16 included)."""
    import torch
    from safetensors import safe_open

    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise GGUFExportError(f"{model_dir} has no *.safetensors weights: save the model with "
                              "save_pretrained(..., safe_serialization=True)")
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():
                yield name, handle.get_tensor(name).to(torch.float32).numpy()


# -- writing --------------------------------------------------------------------------------------


def rope_pairs_layout(weight, n_heads: int):
    """Query/key projection rows reordered from Hugging Face's rotate-half RoPE layout (dimension i
    of a head rotates with i + d/2) to llama.cpp's adjacent pairs (2i with 2i+1): within each head,
    row 2i takes row i and row 2i+1 takes row i + d/2."""
    head_dim = weight.shape[0] // n_heads
    return (weight.reshape(n_heads, 2, head_dim // 2, *weight.shape[1:])
            .swapaxes(1, 2).reshape(weight.shape))


def _write_gguf(model_dir: Path, config: dict[str, Any], tokenizer: dict[str, Any], path: Path, quant: str) -> None:
    import gguf
    import numpy as np

    arch = gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.LLAMA]
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, config["layers"])
    V, K = gguf.GGUFValueType, gguf.Keys
    writer = gguf.GGUFWriter(path, arch)
    for key, value, vtype in (
        (K.General.NAME, str(config["name"]), V.STRING),
        (K.General.FILE_TYPE, _FILE_TYPES[quant], V.UINT32),
        (K.General.QUANTIZATION_VERSION, gguf.GGML_QUANT_VERSION, V.UINT32),
        (K.LLM.VOCAB_SIZE.format(arch=arch), config["vocab_size"], V.UINT32),
        (K.LLM.CONTEXT_LENGTH.format(arch=arch), config["context_length"], V.UINT32),
        (K.LLM.EMBEDDING_LENGTH.format(arch=arch), config["hidden_size"], V.UINT32),
        (K.LLM.BLOCK_COUNT.format(arch=arch), config["layers"], V.UINT32),
        (K.LLM.FEED_FORWARD_LENGTH.format(arch=arch), config["intermediate_size"], V.UINT32),
        (K.Attention.HEAD_COUNT.format(arch=arch), config["heads"], V.UINT32),
        (K.Attention.HEAD_COUNT_KV.format(arch=arch), config["kv_heads"], V.UINT32),
        (K.Attention.KEY_LENGTH.format(arch=arch), config["head_dim"], V.UINT32),
        (K.Attention.VALUE_LENGTH.format(arch=arch), config["head_dim"], V.UINT32),
        (K.Attention.LAYERNORM_RMS_EPS.format(arch=arch), config["rms_eps"], V.FLOAT32),
        (K.Rope.DIMENSION_COUNT.format(arch=arch), config["head_dim"], V.UINT32),
        (K.Rope.FREQ_BASE.format(arch=arch), config["rope_theta"], V.FLOAT32),
        (K.Tokenizer.MODEL, "gpt2", V.STRING),
        (K.Tokenizer.PRE, tokenizer["pre"], V.STRING),
        (K.Tokenizer.ADD_BOS, tokenizer["add_bos"], V.BOOL),
        (K.Tokenizer.ADD_EOS, tokenizer["add_eos"], V.BOOL),
    ):
        writer.add_key_value(key, value, vtype)
    writer.add_key_value(K.Tokenizer.LIST, tokenizer["tokens"], V.ARRAY, V.STRING)
    writer.add_key_value(K.Tokenizer.TOKEN_TYPE, tokenizer["types"], V.ARRAY, V.INT32)
    if tokenizer["merges"]:
        writer.add_key_value(K.Tokenizer.MERGES, tokenizer["merges"], V.ARRAY, V.STRING)
    keys = {"bos": K.Tokenizer.BOS_ID, "eos": K.Tokenizer.EOS_ID, "pad": K.Tokenizer.PAD_ID, "unk": K.Tokenizer.UNK_ID}
    for role, key in keys.items():
        token_id = tokenizer["special"][role]
        if token_id is None:  # the tokenizer names none: the model config may
            token_id = config["ids"][role]
            token_id = token_id[0] if isinstance(token_id, list) else token_id
        if token_id is not None:
            writer.add_key_value(key, int(token_id), V.UINT32)
    if tokenizer["chat_template"]:
        writer.add_key_value(K.Tokenizer.CHAT_TEMPLATE, tokenizer["chat_template"], V.STRING)

    written: set[str] = set()
    for name, array in _safetensors(model_dir):
        if name.endswith("rotary_emb.inv_freq") or (name == "lm_head.weight" and config["tied"]):
            continue  # recomputed by llama.cpp / the tied head is token_embd itself
        found = names.get_type_and_name(name, try_suffixes=(".weight", ".bias"))
        if found is None:
            raise GGUFExportError(f"{model_dir}: tensor {name!r} has no llama.cpp Llama counterpart")
        kind, gguf_name = found
        if kind == gguf.MODEL_TENSOR.ATTN_Q:
            array = rope_pairs_layout(array, config["heads"])
        elif kind == gguf.MODEL_TENSOR.ATTN_K:
            array = rope_pairs_layout(array, config["kv_heads"])
        if quant == "f16" and array.ndim > 1:  # norms stay f32 (llama.cpp computes them in f32)
            array = array.astype(np.float16)
        writer.add_tensor(gguf_name, np.ascontiguousarray(array))
        written.add(gguf_name)
    output = gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.OUTPUT] + ".weight"
    if not config["tied"] and output not in written:
        raise GGUFExportError(f"{model_dir}: tie_word_embeddings is false but there is no lm_head.weight")
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()


def _quantize(source: Path, target: Path, quant: str) -> None:
    """llama.cpp's quantizer (``llama-quantize``): ``source`` (f32 GGUF) to ``target`` in ``quant``."""
    import subprocess

    from generation.llamacpp_engine import INSTALL_HINT

    try:
        from ik_llama_cpp import find_quantize_bin
    except ImportError as exc:
        raise RuntimeError(f"quantizing to {quant} needs llama.cpp's Python bindings ({exc}): {INSTALL_HINT}; "
                           "f32 and f16 exports do not") from exc
    binary = find_quantize_bin()
    if binary is None:
        raise RuntimeError(f"quantizing to {quant} needs the llama-quantize binary of ik-llama-cpp-python, "
                           f"not found in the installed package: reinstall it ({INSTALL_HINT})")
    command = [str(binary), str(source), str(target), quant.upper(), str(len(os.sched_getaffinity(0)))]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0 or not target.is_file():
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise RuntimeError(f"llama.cpp could not quantize {source} to {quant} (exit {done.returncode}): {tail}")


@contextlib.contextmanager
def _scratch(near: Path, kind: str) -> Iterator[Path]:
    """A hidden file name next to ``near`` (same filesystem: the final rename is atomic), removed
    on the way out unless it was renamed away."""
    path = near.parent / f".{near.name}.{kind}-{uuid.uuid4().hex[:8]}"
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)
