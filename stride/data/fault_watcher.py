"""The watcher process of stride.data.mapped_files, and the words for a mapped file that changed in place.

A process that dies of SIGBUS runs no more Python, so a small process of its own names the cause: run as
`python -I -S fault_watcher.py PREFIX FD` (standard library only), it reads the registry of mapped files from its
stdin and its parent's faulthandler report from the pipe FD; when the parent is gone (the pipe's end) after a
report, it stats the files the parent mapped and names the one that changed. Without a report (the parent ended
normally, or was killed without a fault) it says nothing. `describe_change` is also what mapped_files uses in the
process itself, so the two say a change alike.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import sys

REPLACED = ("was removed", "was replaced by another file")  # the map keeps the old bytes: the reader is unharmed


def describe_change(path: str, dev: int, ino: int, size: int, mtime_ns: int | None = None) -> str | None:
    """What happened to the file mapped at `path` (its device, inode, size and modification time then), in words;
    None: nothing. Removed or replaced (a new inode): the map still reads the old file's bytes. Truncated, grown or
    written in place (same inode and size, a new modification time): the map reads the new bytes from then on."""
    try:
        st = os.stat(path)
    except OSError:
        return f"{path} {REPLACED[0]}"
    if (st.st_dev, st.st_ino) != (dev, ino):
        return f"{path} {REPLACED[1]}"
    if st.st_size != size:
        return f"{path} was {'truncated' if st.st_size < size else 'grown'} from {size} to {st.st_size} bytes"
    if mtime_ns is not None and st.st_mtime_ns != mtime_ns:
        return f"{path} was written in place (same size, modified since it was mapped)"
    return None


def main(prefix: str, fault: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; this one waits for its end
    files: dict[int, dict] = {}
    report, pending, open_fds = b"", b"", [0, fault]
    sel = selectors.DefaultSelector()  # epoll: the inherited fd may be above select()'s 1024 in a busy parent
    for fd in open_fds:
        sel.register(fd, selectors.EVENT_READ)
    while fault in open_fds:
        for key, _ in sel.select():
            data = os.read(key.fd, 1 << 16)
            if not data:
                open_fds.remove(key.fd)
                sel.unregister(key.fd)
            elif key.fd == fault:
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
        return
    notes = [n for m in files.values() if (n := describe_change(m["path"], m["dev"], m["ino"], m["size"]))]
    if not notes or b"Bus error" not in report:
        os.write(2, report)
    for note in notes:
        os.write(2, (f"{prefix}: {note} while it was mapped, and reading it ended the process with SIGBUS: a store "
                     "must not be modified in place (stride data ingest writes a new one; --overwrite replaces it "
                     "whole)\n").encode())


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
