"""RoPE scaling: running a policy past the context length it was trained to.

A rotary-position model has only seen positions below its ``max_position_embeddings`` (8,192 for
SmolLM2-135M); past it, attention meets rotation angles it never trained on. Three standard fixes,
each a different rewrite of the rotation frequencies, chosen by a spec string ``TYPE:FACTOR``:

- ``linear:F`` (position interpolation, Chen et al. 2023): every position divided by F, at every
  length: the extended window looks like the trained one, at a finer grain the model never saw;
- ``dynamic:F`` (dynamic NTK): the rotary base grows with the sequence once it passes the trained
  length, so short prompts run exactly as trained (transformers recomputes it per forward;
  vLLM uses the base for the full ``F x`` window at every length, so the two engines differ here);
- ``yarn:F`` (YaRN, Peng et al. 2023): low frequencies interpolated, high ones kept, attention
  temperature ``0.1 ln F + 1``.

An optional third field names the trained length the factor scales from (``yarn:2:8192``; default
the model's own ``max_position_embeddings``). The spec is part of a sweep's generation config
(:func:`evaluation.sweep.generation_config`): results with and without scaling are kept apart.

Both engines get it from here: :func:`apply_to_config` rewrites a transformers config before the
weights load (``config.rope_parameters``, transformers 5), :func:`vllm_overrides` gives vLLM the
same as ``hf_overrides`` (vLLM 0.32 reads ``rope_parameters`` too, and multiplies
``max_position_embeddings`` by the factor itself except for YaRN, which it expects pre-scaled).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

RopeType = Literal["linear", "dynamic", "yarn"]
ROPE_TYPES: tuple[str, ...] = get_args(RopeType)


class RopeScalingError(ValueError):
    """A RoPE scaling spec that cannot be used (the message says how to write one)."""


class RopeScaling(BaseModel):
    """One RoPE scaling setting (parse it from a spec with :meth:`parse`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: RopeType
    factor: float = Field(gt=1, description="how many times the trained length the window is stretched to")
    trained_length: int | None = Field(None, ge=16, description="the length the factor scales from (unset: the "
                                                                "model's max_position_embeddings)")

    @classmethod
    def parse(cls, spec: str | None) -> "RopeScaling | None":
        """``None`` for an unset or ``none`` spec, else the setting; raises :class:`RopeScalingError`."""
        if spec is None or str(spec).strip().lower() in ("", "none"):
            return None
        parts = str(spec).strip().lower().split(":")
        if len(parts) not in (2, 3) or parts[0] not in ROPE_TYPES:
            raise RopeScalingError(f"RoPE scaling {spec!r} is not TYPE:FACTOR[:TRAINED_LENGTH] with TYPE one of "
                                   f"{', '.join(ROPE_TYPES)}: write e.g. yarn:2 or linear:2:8192")
        try:
            factor = float(parts[1])
            trained = int(parts[2]) if len(parts) == 3 else None
        except ValueError:
            raise RopeScalingError(f"RoPE scaling {spec!r}: the factor must be a number and the trained length an "
                                   "integer (e.g. yarn:2 or yarn:2:8192)") from None
        if not factor > 1:
            raise RopeScalingError(f"RoPE scaling {spec!r}: the factor must be above 1 (1 is no scaling: leave it "
                                   "unset)")
        if trained is not None and trained < 16:
            raise RopeScalingError(f"RoPE scaling {spec!r}: the trained length must be at least 16 tokens")
        return cls(type=parts[0], factor=factor, trained_length=trained)

    @property
    def spec(self) -> str:
        """The canonical spec (what caches and run names record): ``yarn:2`` / ``yarn:2:8192``."""
        factor = f"{self.factor:g}"
        return f"{self.type}:{factor}" + (f":{self.trained_length}" if self.trained_length else "")

    def trained(self, config: dict) -> int:
        """The length the factor scales from, for a model config (``config.json`` as a dict)."""
        if self.trained_length:
            return self.trained_length
        limit = _text_config(config).get("max_position_embeddings")
        if not limit:
            raise RopeScalingError("the model's config.json has no max_position_embeddings: give the trained length "
                                   "in the spec (e.g. yarn:2:8192)")
        return int(limit)

    def window(self, config: dict) -> int:
        """The longest sequence the scaled model is meant for: trained length x factor."""
        return int(self.trained(config) * self.factor)

    def overrides(self, config: dict) -> dict:
        """The config fields to replace: ``rope_parameters`` (the model's rope_theta kept) and, for
        YaRN, ``max_position_embeddings`` set to the scaled window (vLLM and transformers both read
        YaRN's window from it; linear and dynamic scale from the trained length)."""
        text = _text_config(config)
        current = text.get("rope_parameters") or {}
        if "rope_theta" not in current and "rope_theta" not in text:
            raise RopeScalingError("the model's config.json has no rope_theta: is it a rotary-position model?")
        theta = current.get("rope_theta", text.get("rope_theta"))
        if current.get("rope_type", "default") != "default":
            raise RopeScalingError(f"the model already scales RoPE ({current.get('rope_type')}): Assay does not stack "
                                   "a second scaling on it")
        trained = self.trained(config)
        parameters = {"rope_type": self.type, "rope_theta": theta, "factor": self.factor}
        fields: dict = {"rope_parameters": parameters}
        if self.type == "yarn":
            parameters["original_max_position_embeddings"] = trained
            fields["max_position_embeddings"] = self.window(config)
        elif self.trained_length and self.trained_length != text.get("max_position_embeddings"):
            fields["max_position_embeddings"] = trained  # dynamic NTK grows the base past this length
        return fields


def _text_config(config: dict) -> dict:
    return config.get("text_config", config)


def read_config(model_dir) -> dict:
    """A model folder's ``config.json``."""
    return json.loads((Path(model_dir) / "config.json").read_text())


def apply_to_config(scaling: RopeScaling | None, hf_config, model_dir) -> None:
    """Rewrite a loaded transformers config in place (before ``from_pretrained(config=...)``)."""
    if scaling is None:
        return
    for key, value in scaling.overrides(read_config(model_dir)).items():
        setattr(getattr(hf_config, "text_config", hf_config), key, value)


def vllm_overrides(scaling: RopeScaling | None, model_dir) -> dict:
    """vLLM's ``hf_overrides`` for the setting (empty without one)."""
    return {} if scaling is None else scaling.overrides(read_config(model_dir))


def model_window(scaling: RopeScaling | None, model_dir) -> int | None:
    """The context a model folder runs to: its trained length, stretched by the scaling if any."""
    config = read_config(model_dir)
    if scaling is not None:
        return scaling.window(config)
    limit = _text_config(config).get("max_position_embeddings")
    return int(limit) if limit else None
