"""Command-line flags built from a configuration model, so a knob's help text lives in one place.

Every user-settable knob in Assay is a field of a pydantic model with ``Field(default,
description=...)`` (:mod:`assets.config_bridge` says why and how Dagster configs are derived
from the same models). A command that exposes such a model adds its flags with
:func:`add_model_flags` (flag ``--max-new-tokens`` for field ``max_new_tokens``, help = the
field's description plus its default, ``choices`` from a ``Literal``; a :data:`DomainNames` field takes
a list of domains in the CLI's one convention, :func:`pipelines.cli.add_domains_argument`) and builds the model from the
parsed arguments with :func:`model_from_args`, which turns a validation error into one line naming
the flag, the value and the model's own message (exit 2).

Only pydantic is imported here (``assay --help`` must stay fast); the models a command passes in
must live in modules that import nothing heavy either.
"""

from __future__ import annotations

import argparse
import types
from typing import Annotated, Any, Iterable, Literal, Mapping, Union, get_args, get_origin

from pydantic import BaseModel, BeforeValidator, ValidationError

from assets.config_problems import problems  # noqa: F401 (re-exported: pipelines.config_flags.problems)


class _DomainList:
    """Marks a model field as a list of domains (see :data:`DomainNames`)."""


def _domain_words(value: Any) -> Any:
    from pipelines.cli import split_domain_words

    return split_domain_words(value) if isinstance(value, (str, list, tuple)) else value


# A list of domain names, given (from Python, YAML or the command line) as words each of which may
# hold commas: "a,b", ["a", "b,c"] and ["a", "b", "c"] validate to the same list.
DomainNames = Annotated[list[str], BeforeValidator(_domain_words), _DomainList()]


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def _strip_optional(annotation: Any) -> tuple[Any, bool]:
    """(the annotation without ``None``, whether ``None`` was allowed)."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], len(args) < len(get_args(annotation))
    return annotation, False


def _shown(default: Any) -> str:
    if isinstance(default, bool):
        return "on" if default else "off"
    if isinstance(default, (list, tuple)):
        return " ".join(map(str, default)) or "none"
    return str(default)


def add_model_flags(parser: argparse.ArgumentParser, model: type[BaseModel], *, include: Iterable[str] | None = None,
                    exclude: Iterable[str] = (), metavars: Mapping[str, str] | None = None) -> list[str]:
    """Add one flag per field of ``model`` (those in ``include`` if given, minus ``exclude``) and
    return the field names added. The argparse default is the model's default, so the namespace
    always holds every field and ``--help`` shows it."""
    metavars = dict(metavars or {})
    excluded = set(exclude)
    names = [n for n in (include if include is not None else model.model_fields) if n not in excluded]
    for name in names:
        field = model.model_fields[name]
        if not field.description:
            raise TypeError(f"{model.__name__}.{name} has no Field(description=...): describe it, the flag's help "
                            "is taken from there")
        default = field.get_default(call_default_factory=True)
        help_text = field.description + ("" if default is None else f" (default: {_shown(default)})")
        help_text = help_text.replace("%", "%%")  # argparse expands %-formats in help ("95% CI" would break --help)
        annotation, _ = _strip_optional(field.annotation)
        if any(isinstance(m, _DomainList) for m in field.metadata):
            from pipelines.cli import add_domains_argument

            add_domains_argument(parser, flag_name(name), dest=name, default=default, help=help_text.replace("%%", "%"),
                                 metavar=metavars.get(name, "DOMAIN"))
            continue
        options: dict[str, Any] = {"dest": name, "default": default, "help": help_text}
        if annotation is bool:
            options["action"] = "store_true" if default is False else argparse.BooleanOptionalAction
        elif get_origin(annotation) is Literal:
            choices = get_args(annotation)
            options.update(choices=choices, type=type(choices[0]))
        elif get_origin(annotation) in (list, tuple):
            (inner,) = get_args(annotation)[:1]
            options.update(nargs="+", type=inner, metavar=metavars.get(name, name.upper()))
        elif annotation in (int, float, str):
            options.update(type=annotation, metavar=metavars.get(name, name.upper()))
        else:
            raise TypeError(f"{model.__name__}.{name}: no command-line form for {annotation!r}; exclude it or give "
                            "it a plain type (int, float, str, bool, a Literal or a list of those)")
        parser.add_argument(flag_name(name), **options)
    return names


def model_from_args(model: type[BaseModel], args: argparse.Namespace, **values: Any) -> BaseModel:
    """Build ``model`` from the flags :func:`add_model_flags` added (and ``values``, which win).
    An invalid value raises :class:`pipelines.cli.CliError` naming the flag, e.g.
    ``--batch-items 0: batch_items must be a positive integer, got 0``."""
    from pipelines.cli import CliError

    given = {name: getattr(args, name) for name in model.model_fields if hasattr(args, name)}
    try:
        return model(**{**given, **values})
    except ValidationError as exc:
        raise CliError(problems(exc, label=lambda f: flag_name(f) if f in given and f not in values else f)) from None
