"""The files this process maps (a data store's values and timestamps), and what to say when one changes in place.

A mapped file truncated or overwritten in place kills the process at its next read past the new end with SIGBUS,
which no Python code survives (audit 16, M3: exit 135 and not one line). `record` keeps each mapped file's identity
(device, inode, size) while its map lives; `mapped_changes` compares them now (for a caller that checks between
steps); `note_faults`, called by a command line, starts with the first mapped file a small watcher process that
receives the registry and faulthandler's report and, when the command died of a fault, names the file that changed.
"""

from __future__ import annotations

import faulthandler
import itertools
import json
import os
import subprocess
import sys
import weakref
from pathlib import Path
from typing import Any

import numpy as np

# The files this process maps, while their maps live: token -> (path, st_dev, st_ino, size when mapped).
MAPPED: dict[int, tuple[str, int, int, int]] = {}
_tokens = itertools.count()
_note: dict[str, Any] = {}  # what note_faults set up: "prefix", and once a file is mapped, "watcher" (a Popen)

# The watcher: a small process of its own (the dying one can run no Python after SIGBUS). It reads the registry
# from its stdin and the faulthandler report of its parent from a pipe; when the parent is gone (the pipe's end)
# after a report, it stats the files the parent mapped and names the one that changed in place. Without a report
# (the parent ended normally, or was killed without a fault) it says nothing.
_WATCHER = r"""
import json, os, selectors, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
prefix, fault = sys.argv[1], int(sys.argv[2])
files, report, pending, open_fds = {}, b"", b"", [0, fault]
sel = selectors.DefaultSelector()  # epoll: the inherited fd may be above select()'s 1024 in a busy parent
for fd in open_fds:
    sel.register(fd, selectors.EVENT_READ)
while fault in open_fds:
    for key, _ in sel.select():
        fd = key.fd
        data = os.read(fd, 1 << 16)
        if not data:
            open_fds.remove(fd)
            sel.unregister(fd)
        elif fd == fault:
            report += data
        else:
            *lines, pending = (pending + data).split(b"\n")
            for line in lines:
                m = json.loads(line)
                if "drop" in m:
                    files.pop(m["drop"], None)
                else:
                    files[m["token"]] = m
if not report:
    sys.exit(0)
notes = []
for m in files.values():
    try:
        st = os.stat(m["path"])
    except OSError:
        notes.append(f"{m['path']} was removed while it was mapped")
        continue
    if (st.st_dev, st.st_ino) != (m["dev"], m["ino"]):
        notes.append(f"{m['path']} was replaced by another file while it was mapped")
    elif st.st_size != m["size"]:
        how = "truncated" if st.st_size < m["size"] else "grown"
        notes.append(f"{m['path']} was {how} from {m['size']} to {st.st_size} bytes while it was mapped")
if not notes or b"Bus error" not in report:
    os.write(2, report)
for note in notes:
    os.write(2, (f"{prefix}: {note}, and reading it ended the process with SIGBUS: a store must not be modified "
                 "in place (stride data ingest writes a new one; --overwrite replaces it whole)\n").encode())
"""


def note_faults(prefix: str) -> None:
    """For a command line (`prefix`: "stride train"): should this process die of SIGBUS while it maps store files,
    one line names the file that changed in place (module docstring). Nothing starts until a file is mapped."""
    _note.setdefault("prefix", prefix)
    for token, entry in list(MAPPED.items()):
        _tell({"token": token, "path": entry[0], "dev": entry[1], "ino": entry[2], "size": entry[3]})


def _tell(message: dict[str, Any]) -> None:
    """Send one registry line to the watcher (started with the first); nothing where note_faults was not called or
    the watcher cannot run."""
    if "prefix" not in _note:
        return
    watcher = _note.get("watcher")
    if watcher is None:
        if "drop" in message:
            return
        read_end, write_end = os.pipe()
        try:
            watcher = subprocess.Popen([sys.executable, "-I", "-S", "-c", _WATCHER, _note["prefix"], str(read_end)],
                                       stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, pass_fds=(read_end,))
        except OSError:
            os.close(write_end)
            _note.pop("prefix")
            return
        finally:
            os.close(read_end)
        _note["watcher"], _note["report"] = watcher, os.fdopen(write_end, "w")
        faulthandler.enable(file=_note["report"], all_threads=True)
    try:
        watcher.stdin.write((json.dumps(message) + "\n").encode())
        watcher.stdin.flush()
    except (OSError, ValueError):  # the watcher is gone (killed with the process group): only the note is lost
        pass


def record(path: Path, mapped: np.memmap) -> None:
    """Record `path` as mapped by this process while `mapped` lives."""
    st = os.stat(path)
    token = next(_tokens)
    entry = MAPPED[token] = (str(path.resolve()), st.st_dev, st.st_ino, st.st_size)
    _tell({"token": token, "path": entry[0], "dev": entry[1], "ino": entry[2], "size": entry[3]})
    weakref.finalize(mapped, _unmapped, token)


def _unmapped(token: int) -> None:
    if MAPPED.pop(token, None) is not None:
        _tell({"drop": token})


def mapped_changes() -> list[str]:
    """The files this process maps whose size or inode is not what it was when they were mapped, each in words; a
    caller that checks between steps stops with these before a read past a file's new end kills it."""
    out = []
    for path, dev, ino, size in list(MAPPED.values()):
        try:
            st = os.stat(path)
        except OSError:
            out.append(f"{path} was removed")
            continue
        if (st.st_dev, st.st_ino) != (dev, ino):
            out.append(f"{path} was replaced by another file")
        elif st.st_size != size:
            out.append(f"{path} was {'truncated' if st.st_size < size else 'grown'} from {size} to {st.st_size} "
                       "bytes")
    return out
