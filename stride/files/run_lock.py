"""One run per folder: an exclusive `fcntl.flock` on `<folder>/.stride-lock`, held while the run lives.

Two runs started on one `--out` used to both exit 0 with one run's checkpoints gone, or with
`metrics.jsonl` and `summary.json` interleaved. Now the run folder (and a checkpoint folder outside it)
is locked by the process that writes it; a second run is refused with the holder's pid and host. The
kernel releases a flock when its process dies, so a run killed with kill -9 leaves no stale lock (the
lock file stays; its content only names the last holder). The descriptor is close-on-exec: a child
process does not inherit it.

Ranks of one job are one holder. `stride train --nproc N` (one node) takes the lock in the launching
process and passes `STRIDE_RUN_LOCK=<folder>|<host>|<pid>` to torchrun's workers; rank 0, which writes the
run folder, accepts that holder instead of locking again. Multi-node launches (every node runs the same
command) and `torchrun -m stride train` by hand lock in rank 0. `stride launch ray` holds it in the
driver the same way. A checkpoint folder outside the run folder (an absolute `checkpoint.dir`) is locked
too; one inside it is covered by the run folder's lock. One process may open a folder it already holds
again (an in-process restart after an exception): the holds are counted and the lock goes with the last.
A holder that wrote nothing in the folder (a refused resume) releases with `restore=True`: the lock file
gets its previous content and times back (or goes, if this process made it), and the folder's own times too
where its entries are the ones it had, so the folder is byte for byte and time for time as it was (only the
inode change times, which no program can set, tell).

A folder inside another stride process's locked folder is refused too (audit 16, M2): a second run whose
`checkpoint.dir` was a running run's checkpoint folder locked its own `.stride-lock` there, resumed from the
first run's checkpoints and replaced them. So `acquire` probes the lock file of every folder above the one it
locks, up to the filesystem root (a shared, non-blocking flock, let go at once; a link is not followed, only a
regular file is probed), and `covered` (a checkpoint folder inside this process's run folder) is False where
another process holds the checkpoint folder's own lock, so it is acquired, and refused, by name. A folder made to
hold other processes' runs (a sweep's points, a bench's torchrun runs) is locked with `nests=True` and is not a
reason to refuse. A probe holds its shared lock for microseconds; a run taking that lock in the same instant tries
again for a moment before it calls the folder in use.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from stride.errors import StrideError
from stride.files.input_file import file_kind
from stride.files.owner import this_host

LOCK_NAME = ".stride-lock"
ENV_HOLDER = "STRIDE_RUN_LOCK"


class FolderInUse(StrideError):
    """Another live stride process holds the folder."""


class LockFileError(StrideError):
    """The folder's lock file is not a plain file (a link, a FIFO, a device): it is never followed or written."""

    exit_code = 2


LOCK_TRIES, LOCK_RETRY_S = 5, 0.02  # another process's probe (a shared lock) lasts microseconds: try again

# resolved lock path -> [fd, holds, the file's content before this process wrote its name (None: it made the file),
# the file's Stamp before (None: it made the file), the folder's Stamp before] (fd -1: held by the launching parent)
_held: dict[Path, list] = {}


@dataclass(frozen=True)
class Stamp:
    """A file's or folder's access and modification times (ns) and, for a folder, its entries' names."""

    times: tuple[int, int]
    names: frozenset[str] | None


def stamp(path: Path, fd: int | None = None) -> Stamp | None:
    """`path`'s times (and a folder's entry names); None where it cannot be read."""
    try:
        st = os.fstat(fd) if fd is not None else os.stat(path)
        names = frozenset(os.listdir(path)) if fd is None and path.is_dir() else None
    except OSError:
        return None
    return Stamp((st.st_atime_ns, st.st_mtime_ns), names)


def put_back(path: Path, before: Stamp | None, fd: int | None = None) -> None:
    """Give `path` the times of `before` again; a folder only where it holds the same entry names as then
    (else something was written in it, and its times say so)."""
    if before is None:
        return
    with contextlib.suppress(OSError):
        if before.names is not None and frozenset(os.listdir(path)) != before.names:
            return
        os.utime(fd if fd is not None else path, ns=before.times)
_guard = threading.Lock()


def _holder_info(fd: int) -> dict:
    """The lock file's content (what its holder wrote: pid, host, since, what, nests); {} where it says nothing."""
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError, RecursionError):
        return {}
    return info if isinstance(info, dict) else {}


def _holder_text(fd: int) -> str:
    return _described(_holder_info(fd))


def _described(info: dict) -> str:
    """'pid 123 on host, since 2024-...' from a lock file's content."""
    try:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(info["since"])))
        return f"pid {int(info['pid'])} on {info['host']}, since {since}"
    except (OSError, ValueError, KeyError, TypeError, OverflowError):
        return "a process that has not written its name yet"


def _taken_elsewhere(path: Path) -> dict | None:
    """The holder's content where another process holds the lock file `path` ({} if it wrote none yet); None where
    none does, or where `path` is missing, a link (never followed), not a regular file, or cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder_info(fd)
        except OSError:
            return None
        return None
    finally:
        os.close(fd)  # lets go of the shared lock at once


def _refuse_inside_held(folder: Path, what: str) -> None:
    """FolderInUse where a folder above `folder` is locked by another process (module docstring); one this process
    holds, or one locked to hold others' runs (`nests`), is no reason."""
    for above in folder.resolve().parents:
        lock = above / LOCK_NAME
        if lock in _held:
            continue
        info = _taken_elsewhere(lock)
        if info is None or info.get("nests") is True:
            continue
        kind = info.get("what") if isinstance(info.get("what"), str) else "run folder"
        raise FolderInUse(f"{what} {folder} is inside {kind} {above}, in use by another stride run "
                          f"({_described(info)}): two runs in one folder overwrite each other's checkpoints and "
                          "metrics; use a folder outside it, or wait for that run to end")


def _delegated(path: Path, fd: int) -> bool:
    """The launching parent holds this lock for its ranks (STRIDE_RUN_LOCK names it and the lock file agrees)."""
    value = os.environ.get(ENV_HOLDER, "")
    parts = value.split("|")
    if len(parts) != 3 or Path(parts[0]) != path.parent:
        return False
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError):
        return False
    return isinstance(info, dict) and [info.get("host"), str(info.get("pid"))] == parts[1:]


def acquire(folder: Path, what: str = "run folder", nests: bool = False) -> Path:
    """Lock `folder` (created if missing) for this process; FolderInUse if another live process holds it or a folder
    above it (module docstring). `nests`: the folder holds runs of other processes (a sweep's, a bench's), which
    may lock folders inside it."""
    with _guard:
        _refuse_inside_held(folder, what)  # before anything is made: a refused run leaves no folder behind
    folder.mkdir(parents=True, exist_ok=True)
    path = folder.resolve() / LOCK_NAME  # the lock file itself is never followed: a planted link is refused
    with _guard:
        if path in _held:
            _held[path][1] += 1
            if nests and _held[path][0] >= 0:
                _write_holder(_held[path][0], what, nests)
            return path
        existed = os.path.lexists(path)
        folder_before = stamp(path.parent)
        fd = _open_lock(path, folder, what)
        try:
            mine = _lock_exclusive(path, fd)
        except BlockingIOError:
            holder = _holder_text(fd)
            os.close(fd)
            raise FolderInUse(f"{what} {folder} is in use by another stride run ({holder}): two runs in one folder "
                              "overwrite each other's checkpoints and metrics; wait for it to end, stop it, or "
                              "use another --out") from None
        except OSError:
            os.close(fd)
            raise
        if not mine:  # the launching parent holds it for this rank
            os.close(fd)
            _held[path] = [-1, 1, None, None, None]
            return path
        if ranks_still_in(folder):  # the lock file is free, but ranks of a launch whose launcher died are not gone
            if not existed:  # unlinked while still locked, as release(restore=True) does: none can lock a ghost
                with contextlib.suppress(OSError):
                    path.unlink()
            os.close(fd)
            put_back(path.parent, folder_before)
            raise FolderInUse(f"{what} {folder} is in use by processes of an earlier `stride train --nproc` whose "
                              "launcher is gone (they are ending: the launcher's death ends them): two runs in one "
                              "folder overwrite each other's checkpoints and metrics; run the command again in a "
                              "few seconds")
        before = _read_all(fd) if existed else None
        file_before = stamp(path, fd) if existed else None
        _write_holder(fd, what, nests)
        _held[path] = [fd, 1, before, file_before, folder_before]
        return path


def _lock_exclusive(path: Path, fd: int) -> bool:
    """LOCK_EX without waiting: True once taken; False where the launching parent holds it for this rank
    (`_delegated`). Otherwise tried again for a moment: what refuses it may be another process's probe
    (`_taken_elsewhere`), a shared lock held for microseconds. BlockingIOError if it stays taken."""
    for attempt in range(LOCK_TRIES):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if attempt == 0 and _delegated(path, fd):
                return False
            if attempt == LOCK_TRIES - 1:
                raise
            time.sleep(LOCK_RETRY_S)
    raise AssertionError("unreachable")


def _write_holder(fd: int, what: str, nests: bool) -> None:
    """This process's name in the lock file: who holds it (`stride top`, a refused run's message) and as what."""
    info = {"pid": os.getpid(), "host": this_host(), "since": time.time(), "what": what}
    if nests:
        info["nests"] = True
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(info).encode(), 0)


def _open_lock(path: Path, folder: Path, what: str) -> int:
    """The lock file opened for reading and writing (made if missing): a regular file only. A link is not followed
    (O_NOFOLLOW: a link to /dev/zero said only "Invalid argument", audit 14 M3; one to another file would have had
    this process's name written into it), a FIFO not waited on (O_NONBLOCK), and anything but a regular file is a
    LockFileError naming it."""
    def refused(kind: str) -> LockFileError:
        return LockFileError(f"{what} {folder}: its lock file {path} is {kind}, not a regular file (stride writes a "
                             "plain file there and never follows or writes through anything else); remove it")

    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        with contextlib.suppress(OSError):
            mode = os.lstat(path).st_mode
            if not stat.S_ISREG(mode):
                kind = file_kind(mode)
                if stat.S_ISLNK(mode):
                    kind += f" (to {os.readlink(path)})"
                raise refused(kind) from None
        raise exc from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise refused(file_kind(mode))
    os.set_blocking(fd, True)
    return fd


def _open_dir(folder: Path) -> int | None:
    try:
        return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None


def hold_shared(folder: Path) -> int | None:
    """A rank's mark that it works in `folder`: a shared flock on the directory itself, held until the returned
    descriptor closes (the kernel drops it with the process). None where directories cannot be locked."""
    fd = _open_dir(folder)
    if fd is None:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def ranks_still_in(folder: Path) -> bool:
    """True while a rank of an earlier launch still works in `folder` (holds its shared lock on the directory).
    False when none does, or where directories cannot be locked (then nothing is known).

    The lock file cannot tell: the launcher holds it for its ranks (`STRIDE_RUN_LOCK`), and a killed launcher's
    lock is gone at once while its ranks take up to a second to end (stride.launch.lifeline)."""
    fd = _open_dir(folder)
    if fd is None:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # also lets go of the exclusive lock at once
    return False


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    return os.pread(fd, size, 0) if size else b""


def release(path: Path, restore: bool = False) -> None:
    """Drop one hold taken by `acquire` (its return value); the last one unlocks. `restore`: put back the lock
    file as it was before this process took it (its content and times, or no file) and the folder's times (where
    its entries are the ones it had), while still holding the lock."""
    with _guard:
        entry = _held.get(path)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            del _held[path]
            fd, _, before, file_before, folder_before = entry
            if fd < 0:
                return
            if restore:
                with contextlib.suppress(OSError):
                    if before is None:
                        # A process that opened the file before this unlink and locks it after the close below
                        # would hold an unlinked file; the window is the few microseconds between its open and
                        # its flock, and only for a folder that had no lock file before.
                        path.unlink()
                    else:
                        os.ftruncate(fd, 0)
                        os.pwrite(fd, before, 0)
                        put_back(path, file_before, fd)
                put_back(path.parent, folder_before)
            os.close(fd)  # closing the descriptor releases the flock


def covered(folder: Path) -> bool:
    """This process already holds `folder` or a folder above it (a checkpoint folder inside the run folder), and no
    other process holds `folder`'s own lock (a run whose `checkpoint.dir` is this folder: then the caller acquires
    it, and is refused naming that run)."""
    target = folder.resolve()
    with _guard:
        if target / LOCK_NAME in _held:
            return True
        if not any(p.parent in target.parents for p in _held):
            return False
    return _taken_elsewhere(target / LOCK_NAME) is None


def env_for_ranks(path: Path) -> dict[str, str]:
    """What the launching process passes to its ranks so rank 0 knows the lock is held for it."""
    return {ENV_HOLDER: f"{path.parent}|{this_host()}|{os.getpid()}"}


def _listing(folder: Path) -> dict[str, tuple[int, int]]:
    with contextlib.suppress(OSError):
        return {e.name: (e.stat().st_mtime_ns, e.stat().st_size) for e in os.scandir(folder) if e.name != LOCK_NAME}
    return {}


@contextlib.contextmanager
def held(folder: Path, what: str = "run folder", nests: bool = False):
    """`with held(folder) as path:` the folder is locked inside the block. When nothing in it changed inside
    the block (the ranks refused a resume, or found the run finished, or a sweep refused its options with an
    error), the folder is left as it was found."""
    made = not folder.exists()
    path = acquire(folder, what, nests)
    before = _listing(folder)
    try:
        yield path
    finally:
        unchanged = _listing(folder) == before
        release(path, restore=unchanged)
        if unchanged and made:
            with contextlib.suppress(OSError):
                folder.rmdir()
