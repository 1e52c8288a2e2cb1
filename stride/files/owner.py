"""Whose is this temporary folder? Names that say which stride process wrote them, and clean-up of only those.

A save or an ingestion writes under a temporary name first and renames into place. A process killed
in between leaves the temporary entry behind. Clean-up used to remove every `.tmp-*` / `.trash-*`
entry it saw, another project's included, and never removed `.tmp-<store>-*` folders of killed
ingestions at all. Now every temporary name stride writes carries a tag, `.<kind>-stride-<host>-<pid>-<rest>`,
and clean-up removes an entry only when the tag is stride's and its process is gone: same host and no
such pid (or, where the caller holds the folder's lock, any other host's: nobody else may write there).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

KINDS = ("tmp", "trash")
_NAME_RE = re.compile(r"^\.(tmp|trash)-stride-([A-Za-z0-9._]+)-(\d+)-(.+)$")


def this_host() -> str:
    """The host name as it appears in tags: letters, digits, '.' and '_' only (so '-' can separate)."""
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname() or "localhost")[:64]


def tagged_name(kind: str, rest: str, *, host: str | None = None, pid: int | None = None) -> str:
    """`.<kind>-stride-<host>-<pid>-<rest>`, e.g. `.tmp-stride-box1-4242-step_00000040`."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} is not one of {KINDS}")
    return f".{kind}-stride-{host or this_host()}-{os.getpid() if pid is None else pid}-{rest}"


@dataclass(frozen=True)
class Tag:
    kind: str
    host: str
    pid: int
    rest: str


def parse(name: str) -> Tag | None:
    """The tag of a name stride wrote; None for any other name."""
    m = _NAME_RE.match(name)
    return Tag(m.group(1), m.group(2), int(m.group(3)), m.group(4)) if m else None


def pid_alive(pid: int) -> bool:
    """Is a process with this id running on this host? (A reused id reads as alive: kept, never wrongly removed.)"""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def abandoned(tag: Tag, *, other_hosts: bool, own_pid: bool) -> bool:
    """Its writer is gone. Another host's process cannot be checked: only with `other_hosts` (the caller holds
    the folder's lock). This process' own entries count as abandoned only with `own_pid`."""
    if tag.host != this_host():
        return other_hosts
    if tag.pid == os.getpid():
        return own_pid
    return not pid_alive(tag.pid)


def remove_abandoned(folder: Path, *, other_hosts: bool = False, own_pid: bool = False,
                     rest: re.Pattern[str] | None = None) -> list[str]:
    """Remove `folder`'s tagged entries whose writer is gone (and whose rest matches `rest`); returns their names."""
    removed: list[str] = []
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return removed
    for p in entries:
        tag = parse(p.name)
        if tag is None or (rest is not None and not rest.match(tag.rest)):
            continue
        if not abandoned(tag, other_hosts=other_hosts, own_pid=own_pid):
            continue
        with contextlib.suppress(OSError):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
            removed.append(p.name)
    return removed
