"""The one exception type for errors the person running Assay caused and can fix.

A bad flag value, a file that is missing or unreadable, an unknown domain or checkpoint, a run
name that exists with another config: the library raises :class:`UserError` (or a subclass)
where it detects the problem, with the offending value and what to do in the message. The
``assay`` CLI maps it once, in :func:`pipelines.cli.main`, to ``assay: error: <message>`` and exit
status 2; anything else that escapes a command is a bug and keeps its traceback.

Error types that predate this one subclass it beside their old base (``class RecipeError(UserError,
ValueError)``), so code that catches the old base keeps working. It lives in ``storage`` (the
bottom layer, stdlib only here) so every stage above can raise it.
"""

from __future__ import annotations


class UserError(Exception):
    """An error the user can fix; its message says what went wrong and what to do."""

    exit_code = 2
