"""The base of errors whose message is the whole story: the CLI prints it as one line, no traceback.

A subclass sets `exit_code`: 2 for bad input (a file, a store, a value the user gave), 1 for a state of
the machine or the folder (a disk that is full, a folder another run holds).
"""

from __future__ import annotations

import errno
from pathlib import Path


class StrideError(Exception):
    """An error stride explains completely in its message (naming the input and what is wrong)."""

    exit_code = 1


# operating-system errors that say a path the user gave is the wrong kind of thing (a file where a folder belongs, or
# the reverse): bad input, exit status 2; a missing permission or a full disk is the machine's state, 1
WRONG_KIND_OF_PATH = (FileExistsError, NotADirectoryError, IsADirectoryError)


def one_line(text: str) -> str:
    """`text` on one line: line breaks and other control characters escaped, as a user typed them."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


def os_reason(exc: OSError) -> str:
    """What went wrong, in words: a full disk (or quota, or file-size limit) is said as such."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return "the disk is full"
    return exc.strerror or str(exc)


def file_in_path(p: Path) -> Path | None:
    """The first of `p` and its parents that exists and is not a directory (what makes `p` unusable as a
    directory path); None where there is none."""
    return next((q for q in [p, *p.parents] if q.exists() and not q.is_dir()), None)


def describe_os_error(exc: OSError, path: str | Path | None = None) -> str:
    """One line for an operating-system error on a path the user gave (missing, a file where a directory
    belongs, no permission, a full disk): which path, and what is wrong with it, instead of a traceback."""
    # os.replace(tmp, target) and the like report the user's path second
    named = exc.filename2 if exc.filename2 is not None else exc.filename
    path = named if named is not None else path
    if path is None:
        return os_reason(exc)
    p = Path(str(path))
    if isinstance(exc, FileNotFoundError):
        missing = next((q for q in [p, *p.parents] if q.parent.exists()), p)
        return f"{p}: no such file or directory" + (f" ({missing} does not exist)" if missing != p else "")
    if isinstance(exc, FileExistsError):
        what = "a file" if p.is_file() else "something"
        return f"{p}: {what} of that name exists where a directory is needed; give another path"
    if isinstance(exc, IsADirectoryError):
        return f"{p}: is a directory; give a file path"
    if isinstance(exc, NotADirectoryError):
        blocker = file_in_path(p)
        return f"{p}: {blocker} is a file, not a directory" if blocker else f"{p}: not a directory"
    if isinstance(exc, PermissionError):
        return f"{p}: permission denied"
    return f"{p}: {os_reason(exc)}"
