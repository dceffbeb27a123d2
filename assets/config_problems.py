"""A pydantic validation error as one line a user can act on (the config bridge and the CLI flags).

Kept free of dagster so ``assay --help`` can import it cheaply.
"""

from __future__ import annotations

from pydantic import ValidationError


def problems(exc: ValidationError, *, label=lambda field: field) -> str:
    """A validation error as one line: ``<label> <value>: <the model's message>`` per problem."""
    parts = []
    for error in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        parts.append(f"{label(loc)} {error.get('input')!r}: {message}" if loc else message)
    return "; ".join(parts)
