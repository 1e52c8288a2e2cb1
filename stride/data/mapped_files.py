"""The files this process maps (a data store's values and timestamps), and what to say when one changes in place.

A mapped file truncated or overwritten in place kills the process at its next read past the new end with SIGBUS,
which no Python code survives (audit 16, M3: exit 135 and not one line). `record` keeps each mapped file's identity
(device, inode, size, modification time) while its map lives; `mapped_changes` compares them now: the checkpoint
callback before each save and the run's summary at its end (a file written in place with its size kept kills no
reader: it feeds it other bytes from then on, which only this check sees). `note_faults`, called by a command line,
starts with the first mapped file a small watcher process that receives the registry and faulthandler's report
and, when the command died of a fault, names the file that changed (stride.data.fault_watcher).
"""

from __future__ import annotations

import faulthandler
import json
import os
import subprocess
import sys
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from stride.data.fault_watcher import REPLACED, describe_change

# The files this process maps, while their maps live: token -> {"path", "dev", "ino", "size", "mtime_ns" when mapped}.
MAPPED: dict[int, dict[str, Any]] = {}
_issued = [0]  # tokens issued so far (each map's token is the count before it): `mark` reads it
_note: dict[str, Any] = {}  # what note_faults set up: "prefix", and once a file is mapped, "watcher" (a Popen)
WATCHER = Path(__file__).with_name("fault_watcher.py")  # the watcher process's script (its docstring says how)


def note_faults(prefix: str) -> None:
    """For a command line (`prefix`: "stride train"): should this process die of SIGBUS while it maps store files,
    one line names the file that changed in place (module docstring). Nothing starts until a file is mapped."""
    _note.setdefault("prefix", prefix)
    for token, entry in list(MAPPED.items()):
        _tell({"token": token, **entry})


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
            watcher = subprocess.Popen([sys.executable, "-I", "-S", str(WATCHER), _note["prefix"], str(read_end)],
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
    token = _issued[0]
    _issued[0] += 1
    entry = MAPPED[token] = {"path": str(path.resolve()), "dev": st.st_dev, "ino": st.st_ino, "size": st.st_size,
                             "mtime_ns": st.st_mtime_ns}
    _tell({"token": token, **entry})
    weakref.finalize(mapped, _unmapped, token)


def _unmapped(token: int) -> None:
    if MAPPED.pop(token, None) is not None:
        _tell({"drop": token})


def mark() -> int:
    """A point in the sequence of maps: `mapped_changes(tokens=range(mark_before, mark_after))` asks about the maps
    made in between (a run's own, not those of an earlier run of the same store still alive in this process)."""
    return _issued[0]


def mapped_changes(in_place_only: bool = False, tokens: range | None = None) -> list[str]:
    """The files this process maps that are not what they were when they were mapped (inode, size, modification
    time), each in words, once each. `in_place_only`: only the changes the maps see (truncated, grown, written in
    place), not a file removed or replaced by a new one, whose old bytes the map still reads. `tokens`: only the
    maps made in that range (`mark`): a run's own, its store's files and the caches derived from it, not those of
    another run in this process."""
    entries = [e for t, e in list(MAPPED.items()) if tokens is None or t in tokens]
    notes = dict.fromkeys(n for e in entries if (n := describe_change(**e)))
    return [n for n in notes if not n.endswith(REPLACED)] if in_place_only else list(notes)
