"""Text from input files, made safe to show: on a terminal through rich, and in a markdown table.

Run, workload, operator and column names, units, notes and paths come from files someone else may have written
(a results.json, a summary.json, a trace, a metrics.jsonl, a hardware TOML). Shown as they are, they act instead of
reading as text (outside audit 14, M1, M2, L7):

- rich parses `[...]` as markup: `x[/bold]y` ends the command with a MarkupError traceback, and a legal name loses its
  bracketed part (`lstm[bs=64]` prints as `lstm`, Lightning's `[pl][profile]...` labels lose their prefix); rich
  also turns `:name:` into an emoji;
- control characters reach the terminal raw: ESC sequences set the window title, recolour, clear or hide lines, and
  on some terminals write the clipboard (rich strips only BEL, BS, VT, FF and CR);
- in summary.md, `|` splits a table row and `<...>` is raw HTML to viewers that render it.

So every such value goes through `literal` (a rich Text: printed as written, never parsed), `plain` (the control
characters shown as escapes, `\\x1b`, by `stride.errors.one_line`'s rule) or `md_cell`. HTML is `html.escape`'s.
This module sits beside `stride.errors`, outside the layers, so that every package that prints can use it.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from stride.errors import one_line


def plain(value: Any, *, lines: bool = False) -> str:
    """`str(value)` with every character that is not printable (C0 and C1 controls, DEL, bidi overrides, zero-width
    marks) written as its escape (`\\x1b`), so nothing in it acts on a terminal; `lines` keeps line breaks (a
    multi-line note), else they are escaped too (a table cell, a name)."""
    s = str(value)
    return "\n".join(one_line(part) for part in s.split("\n")) if lines else one_line(s)


def literal(value: Any, style: str = "", *, lines: bool = False) -> Text:
    """`value` as a rich Text: shown as written (no markup, no emoji), its control characters escaped (`plain`).
    For table cells, titles, captions and printed lines that carry data."""
    return Text(plain(value, lines=lines), style=style)


def add_row(table: Any, *cells: Any) -> None:
    """A rich Table row whose cells are shown as written (`literal`); a cell that is already a Text (styled by the
    caller) is kept as it is."""
    table.add_row(*(c if isinstance(c, Text) else literal(c) for c in cells))


_MD = str.maketrans({"\\": "\\\\", "|": "\\|", "[": "\\[", "]": "\\]", "&": "&amp;", "<": "&lt;", ">": "&gt;"})


def md_cell(value: Any) -> str:
    """`value` for summary.md (a table cell or a line): `|` cannot split the row, `<` `>` `&` are entities (no raw
    HTML, no autolink), `[` `]` and `\\` are backslash-escaped (no link or image), and control characters and line
    breaks are escapes (one line). Markdown viewers show the value as written. Emphasis and code spans are left:
    they change how text looks, not what it does, and stride's own advice quotes commands in backticks."""
    return plain(value).translate(_MD)
