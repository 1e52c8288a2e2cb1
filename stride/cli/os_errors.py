"""One line for an operating-system error on a path the user gave (missing, a file where a directory
belongs, no permission, a full disk): which path, and what is wrong with it, instead of a traceback."""

from __future__ import annotations

import errno
from pathlib import Path


def describe_os_error(exc: OSError) -> str:
    # os.replace(tmp, target) and the like report the user's path second
    path = exc.filename2 if exc.filename2 is not None else exc.filename
    if path is None:
        return exc.strerror or str(exc)
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
        blocker = next((q for q in [p, *p.parents] if q.exists() and not q.is_dir()), None)
        return f"{p}: {blocker} is a file, not a directory" if blocker else f"{p}: not a directory"
    if isinstance(exc, PermissionError):
        return f"{p}: permission denied"
    if exc.errno == errno.ENOSPC:
        return f"{p}: no space left on the device"
    return f"{p}: {exc.strerror or exc}"
