"""Dagster run configs derived from the library's configuration models, never copied by hand.

The idiom, everywhere in Assay: a user-settable knob is a field of a pydantic v2 model, written
``name: type = Field(default, description="...")``, beside the code it configures
(:class:`evaluation.sweep_config.SweepConfig`, :class:`sandbox.Limits`, ``training.config``'s
recipe, ...). Validators reject a bad value when the model is built, with a message that names
the value and says what to do. Models are ``extra="forbid"`` (a misspelt key fails) and frozen
where they describe one run. Everything else is derived from the model:

- the command line: :func:`pipelines.config_flags.add_model_flags` (help = the description);
- the Dagster launchpad: :func:`dagster_config` here builds a ``dg.Config`` subclass with the
  same field names, types, defaults and descriptions (Dagster shows ``Field(description=...)``,
  not attribute docstrings), whose values are validated by the library model itself when the
  run starts, so a bad launchpad value fails with the library's message. ``.to_library()``
  returns the library model for the asset to use.

An asset config adds what only the asset needs (e.g. which domains) as further fields on a
subclass, each with a description; ``tests/pipelines/test_config_bridge.py`` fails when an
asset's ``dg.Config`` is written by hand or has a field without a description.
"""

from __future__ import annotations

from typing import Any, ClassVar, Iterable

import dagster as dg
from pydantic import BaseModel, Field, ValidationError, create_model, model_validator
from pydantic_core import PydanticUndefined

from assets.config_problems import problems


class DerivedConfig(dg.Config):
    """Base of every asset config built by :func:`dagster_config`."""

    library_model: ClassVar[type[BaseModel]]
    library_fields: ClassVar[tuple[str, ...]]

    @model_validator(mode="after")
    def _library_accepts(self):
        # The library model is the one validator: a launchpad value it rejects fails here, with its
        # message, before the asset body runs.
        self.to_library()
        return self

    def to_library(self, **values: Any) -> BaseModel:
        """The library model built from this config's mirrored fields (``values`` win)."""
        given = {name: getattr(self, name) for name in self.library_fields}
        try:
            return self.library_model(**{**given, **values})
        except ValidationError as exc:
            # One line, the library's own words; a ValueError so pydantic reports it for this config.
            raise ValueError(f"invalid {self.library_model.__name__}: {problems(exc)}") from None


def dagster_config(model: type[BaseModel], *, name: str, exclude: Iterable[str] = (),
                   doc: str | None = None) -> type[DerivedConfig]:
    """A ``dg.Config`` subclass mirroring ``model``'s fields (all but ``exclude``): same names,
    annotations, defaults and descriptions. Subclass it to add asset-only fields."""
    excluded = set(exclude)
    unknown = excluded - set(model.model_fields)
    if unknown:
        raise ValueError(f"dagster_config({model.__name__}): no field(s) {sorted(unknown)} to exclude")
    fields: dict[str, Any] = {}
    for field_name, info in model.model_fields.items():
        if field_name in excluded:
            continue
        if not info.description:
            raise TypeError(f"{model.__name__}.{field_name} has no Field(description=...): the launchpad shows "
                            "only descriptions, so describe it")
        # A concrete default (not a factory): Dagster's schema shows the value, and pydantic copies
        # mutable defaults per instance.
        default = info.get_default(call_default_factory=True)
        fields[field_name] = (info.annotation, Field(... if default is PydanticUndefined else default,
                                                     description=info.description))
    derived = create_model(name, __base__=DerivedConfig, __doc__=doc or model.__doc__, **fields)
    derived.library_model = model
    derived.library_fields = tuple(fields)
    return derived
