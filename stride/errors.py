"""The base of errors whose message is the whole story: the CLI prints it as one line, no traceback.

A subclass sets `exit_code`: 2 for bad input (a file, a store, a value the user gave), 1 for a state of
the machine or the folder (a disk that is full, a folder another run holds).
"""

from __future__ import annotations


class StrideError(Exception):
    """An error stride explains completely in its message (naming the input and what is wrong)."""

    exit_code = 1


def one_line(text: str) -> str:
    """`text` on one line: line breaks and other control characters escaped, as a user typed them."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)
