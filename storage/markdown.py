"""Markdown tables: the one way Assay writes a table as text, for Dagster metadata
(``MetadataValue.md``) and MLflow text artifacts (``expectations.md``).

It lives in ``storage`` because that is the layer every stage already imports: quality, evaluation
and assets may all import it without one stage importing another. Standard library only.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence


def cell(value: Any, width: int | None = None) -> str:
    """``value`` as one table cell: ``|`` escaped, newlines as spaces, cut to ``width`` characters
    with an ellipsis (None: never cut)."""
    text = str(value).replace("|", "\\|").replace("\n", " ")
    return text if width is None or len(text) <= width else text[: width - 1] + "…"


def markdown_table(rows: Iterable[Mapping[str, Any]], columns: Sequence[str] | Mapping[str, str], *,
                   width: int | None = 80, widths: Mapping[str, int | None] | None = None) -> str:
    """A markdown table of ``rows`` (mappings; a missing key is an empty cell).

    ``columns``: the keys to show, in order, or a mapping key -> header. Every cell is cut to
    ``width`` characters, or to ``widths[key]`` for the keys named there (None: never cut).
    Format numbers before passing them: this function only lays out text."""
    headers = dict(columns) if isinstance(columns, Mapping) else {c: c for c in columns}
    limits = {key: (widths or {}).get(key, width) for key in headers}
    lines = ["| " + " | ".join(cell(h) for h in headers.values()) + " |", "|" + "---|" * len(headers)]
    for row in rows:
        lines.append("| " + " | ".join(cell(row.get(key, ""), limits[key]) for key in headers) + " |")
    return "\n".join(lines)
