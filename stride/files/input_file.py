"""Reading a file the user named (a config, a `--hardware-file`, an `--efficiency` JSON): only a regular file,
and only up to a size the caller gives.

`open()` on a FIFO blocks until some process writes to it, and reading /dev/zero (or a huge file) never ends
or fills the memory; a directory, a socket or a block device is no input either. So the path is checked with
`os.stat` before it is opened (nothing is opened that is not a regular file: opening a device can have effects
of its own), opened with O_NONBLOCK (a FIFO put there in between cannot block the open), and checked again with
`os.fstat` on what was opened. Every refusal is an `InputFileError`: one line naming the input (`what`), its path,
and what is wrong (missing, a FIFO, a character device, a directory, too large, unreadable); exit code 2, bad
input. A command whose input errors are ConfigErrors re-raises it as one: `raise ConfigError(str(exc)) from None`.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import BinaryIO

from stride.errors import StrideError, file_in_path, one_line, os_reason

_CHUNK = 1 << 20  # read in pieces, so a limit far above the file's size allocates no more than the file


class InputFileError(StrideError):
    """A file the user named cannot be read as input: the message names it and says why."""

    exit_code = 2

    def __init__(self, message: str, path: str | os.PathLike[str]) -> None:
        super().__init__(message)
        self.path = path


class InputFileMissing(InputFileError):
    """There is nothing at the path (or a part of the path is not a directory)."""


class NotARegularFile(InputFileError):
    """The path is a FIFO, a device, a directory, a socket: something that is not a regular file."""

    def __init__(self, message: str, path: str | os.PathLike[str], kind: str) -> None:
        super().__init__(message, path)
        self.kind = kind


class InputFileTooLarge(InputFileError):
    """The file holds more bytes than the caller's limit."""

    def __init__(self, message: str, path: str | os.PathLike[str], limit: int) -> None:
        super().__init__(message, path)
        self.limit = limit


def file_kind(mode: int) -> str:
    """What a stat mode is, in words ('a regular file', 'a FIFO', 'a character device', ...)."""
    for test, words in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"),
                        (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                        (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                        (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return words
    return f"a special file (mode {stat.S_IFMT(mode):#o})"


def _size(n: int) -> str:
    """'512 bytes', or '20971520 bytes (20.0 MiB)'."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= factor:
            return f"{n} bytes ({n / factor:.1f} {unit})"
    return f"{n} bytes"


def _shown(path: str | os.PathLike[str]) -> str:
    return one_line(os.fsdecode(path))


def _refuse_os_error(exc: OSError, path: str | os.PathLike[str], what: str) -> InputFileError:
    p = _shown(path)
    if isinstance(exc, FileNotFoundError):
        return InputFileMissing(f"{what} not found: {p}", path)
    if isinstance(exc, NotADirectoryError):
        blocker = file_in_path(Path(os.fsdecode(path)))
        why = f" ({one_line(str(blocker))} is a file, not a directory)" if blocker is not None else ""
        return InputFileMissing(f"{what} not found: {p}{why}", path)
    if isinstance(exc, PermissionError):
        return InputFileError(f"{what} {p}: cannot read it: permission denied", path)
    return InputFileError(f"{what} {p}: cannot read it: {os_reason(exc)}", path)


def _check(st: os.stat_result, path: str | os.PathLike[str], what: str, limit: int | None) -> None:
    if not stat.S_ISREG(st.st_mode):
        kind = file_kind(st.st_mode)
        raise NotARegularFile(f"{what} {_shown(path)} is {kind}, not a regular file", path, kind)
    if limit is not None and st.st_size > limit:
        raise InputFileTooLarge(f"{what} {_shown(path)} is {_size(st.st_size)}, over the limit of {_size(limit)}",
                                path, limit)


def open_input_file(path: str | os.PathLike[str], *, limit: int | None, what: str = "input file") -> BinaryIO:
    """`path` opened for reading in binary, when it is a regular file of at most `limit` bytes (None: any size).

    An InputFileError (exit code 2) naming `what` and the path otherwise: InputFileMissing, NotARegularFile
    (a FIFO, /dev/zero, a directory, ...), InputFileTooLarge, or the base class for a file that cannot be opened
    (permission denied, ...). The size is checked when the file is opened; a caller that reads it all should use
    `read_input_bytes` or `read_input_text`, which also stop a file that grows past `limit` while being read.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    try:
        _check(os.stat(path), path, what, limit)  # before opening: a device or FIFO is never opened
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
                     | getattr(os, "O_BINARY", 0))  # O_NONBLOCK: a FIFO swapped in since the stat cannot block
    except OSError as exc:
        raise _refuse_os_error(exc, path, what) from None
    except ValueError:  # a NUL byte in the path
        raise InputFileMissing(f"{what} not found: {_shown(path)} (a path cannot hold a NUL byte)", path) from None
    try:
        _check(os.fstat(fd), path, what, limit)  # what was opened, should the path have changed since the stat
        if getattr(os, "O_NONBLOCK", 0):
            os.set_blocking(fd, True)  # a regular file: reads as usual
        return os.fdopen(fd, "rb")
    except BaseException as exc:
        os.close(fd)
        if isinstance(exc, OSError):
            raise _refuse_os_error(exc, path, what) from None
        raise


def read_input_bytes(path: str | os.PathLike[str], *, limit: int, what: str = "input file") -> bytes:
    """All of `path`'s bytes, when it is a regular file of at most `limit` bytes; an InputFileError otherwise
    (see `open_input_file`). At most `limit` + 1 bytes are read, however large the file is or grows."""
    with open_input_file(path, limit=limit, what=what) as f:
        chunks: list[bytes] = []
        total = 0
        try:
            while chunk := f.read(min(_CHUNK, limit + 1 - total)):
                chunks.append(chunk)
                total += len(chunk)
                if total > limit:
                    raise InputFileTooLarge(f"{what} {_shown(path)} is over the limit of {_size(limit)} (it grew "
                                            "while being read)", path, limit)
        except OSError as exc:  # EIO, EISDIR on an odd file system, ...
            raise _refuse_os_error(exc, path, what) from None
    return b"".join(chunks)


def read_input_text(path: str | os.PathLike[str], *, limit: int, what: str = "input file",
                    encoding: str = "utf-8") -> str:
    """`path`'s text (`limit` in bytes, as `read_input_bytes`); text that is not `encoding` is an InputFileError
    naming the first bad byte and its offset."""
    data = read_input_bytes(path, limit=limit, what=what)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise InputFileError(f"{what} {_shown(path)} is not {encoding.upper()} text (byte {data[exc.start]:#04x} "
                             f"at offset {exc.start})", path) from None


def read_input_range(path: str | os.PathLike[str], offset: int, count: int, *, limit: int | None,
                     what: str = "input file") -> bytes:
    """At most `count` bytes of `path` from byte `offset` on (a file being followed: `stride top`'s metrics.jsonl),
    when it is a regular file of at most `limit` bytes; an InputFileError otherwise, as `open_input_file` (a FIFO
    or /dev/zero is refused, never read). Fewer bytes (or none) where the file ends sooner."""
    if offset < 0 or count < 0:
        raise ValueError(f"offset and count must be >= 0, got {offset} and {count}")
    with open_input_file(path, limit=limit, what=what) as f:
        try:
            f.seek(offset)
            return f.read(count)
        except OSError as exc:
            raise _refuse_os_error(exc, path, what) from None


def not_found_or_special(path: str | Path) -> str:
    """Why a path that is neither a regular file nor a directory cannot be read: "P is a FIFO, not a regular file"
    (a FIFO, a device, a socket: `is_file()` says False, and "no such file" would be wrong), else "P: no such file or
    directory"."""
    p = Path(path)
    try:
        mode = os.stat(p).st_mode
    except OSError:
        return f"{p}: no such file or directory"
    return f"{p} is {file_kind(mode)}, not a regular file"


def json_object(text: str, path: str | os.PathLike[str]) -> dict:
    """`text`, read from the file `path`, as the JSON object stride writes there: an InputFileError naming the file
    where it is not JSON (nested past Python's recursion limit too) or not an object. One rule for the run files that
    repro, top and calibrate read."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InputFileError(f"{_shown(path)}: not valid JSON ({exc})", path) from None
    if not isinstance(obj, dict):
        raise InputFileError(f"{_shown(path)}: holds a JSON {type(obj).__name__}, not the object stride writes", path)
    return obj

