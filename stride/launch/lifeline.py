"""The processes of `stride train --nproc N` end with their launcher, however it ends (`kill -9` included).

The chain is launcher (`stride train --nproc`, the pid the user has) -> torchrun's agent -> one worker per
rank. torchrun starts each worker in a session of its own, so neither a signal to the launcher's process
group nor the launcher's death reaches them: after `kill -9` of the launcher they used to train on and write
into the run folder, whose lock (`stride.files.run_lock`, held by the launcher for its ranks) had died with
the launcher, so the documented resume (the same command again) started a second writer in the folder.

Now:

- torchrun is started with `PR_SET_PDEATHSIG = SIGKILL` (Linux `prctl`): the kernel kills it when the
  launcher's thread that started it ends (`run_torchrun` waits in that thread until torchrun is gone).
- each worker sets `PR_SET_PDEATHSIG = SIGKILL` on itself, first thing (torchrun starts its workers from
  its main thread, which lives as long as the agent), so torchrun's death kills every worker.
- each worker also runs a daemon thread that checks every `POLL_S` that its parent is still the process
  that started it and that the launcher (`STRIDE_LAUNCHER_PID`, set by `run_torchrun`) is still alive,
  and otherwise ends the process with `os._exit(EXIT_CODE)`: the backstop where `prctl` is missing
  (macOS) or the parent died before the worker could ask for the signal.

Either way a worker ends at once, as if killed with the launcher: no final checkpoint, no summary.json, so
the folder is never marked finished; the same command resumes from the newest committed checkpoint.

A run (with or without `--nproc`) in a folder where old workers still run is refused: every worker of a
launch that hands its run folder to its ranks (`STRIDE_RUN_LOCK`) holds a shared `flock` on the run
folder's directory for its life (`run_lock.hold_shared`), and whoever takes the folder's lock tries an
exclusive one on the directory (and lets it go) first (`run_lock.ranks_still_in`). The kernel drops a worker's
lock when the process ends, so nothing is left behind and no file is added to the folder.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from stride.files import run_lock

ENV_LAUNCHER = "STRIDE_LAUNCHER_PID"  # the launcher's pid, as its ranks see it (set by run_torchrun)
POLL_S = 0.5  # how often a worker checks its launcher (the backstop to the parent-death signal)
EXIT_CODE = 128 + 9  # as a process killed with SIGKILL: what the parent-death signal would have done
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

_state: dict[str, object] = {}  # this process's watch: "thread", "folder_fd" (kept open for the process's life)


def _prctl() -> Callable[..., int] | None:
    """libc's prctl, or None where there is none (not Linux, no libc to load)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # the interpreter's own symbols, libc's among them
        fn = libc.prctl
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    fn.restype = ctypes.c_int
    return fn


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send `sig` to this process when the thread that started it ends. False where unsupported."""
    fn = _prctl()
    return fn is not None and fn(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0


def child_setup(extra: Callable[[], None] | None = None) -> Callable[[], None]:
    """A `preexec_fn` for a child that must not outlive this process: parent-death signal SIGKILL, and an
    immediate exit if this process is already gone by the time the child asks for it. Everything it needs is
    looked up here, before the fork."""
    fn, parent = _prctl(), os.getpid()

    def setup() -> None:
        if extra is not None:
            extra()
        if fn is not None:
            fn(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the launcher died between the fork and the prctl
            os._exit(EXIT_CODE)

    return setup


# -- the launcher's side: its ranks' environment, and the check before it starts them --

def env_for_ranks() -> dict[str, str]:
    """What `run_torchrun` adds to its child's environment: this process is the ranks' launcher."""
    return {ENV_LAUNCHER: str(os.getpid())}


def handed_folder(env: dict[str, str] | os._Environ[str]) -> Path | None:
    """The run folder a launcher hands to its ranks (`STRIDE_RUN_LOCK=<folder>|<host>|<pid>`), or None."""
    value = env.get(run_lock.ENV_HOLDER, "")
    parts = value.rsplit("|", 2)
    return Path(parts[0]) if len(parts) == 3 and parts[0] else None


# -- a worker's side --

def proc_stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after "pid (comm) " (state, ppid, ...; starttime is the 20th), or None where the
    process is gone or /proc has no such file. The command name may hold spaces and parentheses: cut at the last ")"."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2:].split()


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state, start time) of `pid` from /proc, or None where it is gone or /proc has no such file."""
    fields = proc_stat(pid)
    return (fields[0], fields[19]) if fields and len(fields) > 19 else None


class Lifeline:
    """Whether the launcher `launcher` and this process's parent `parent` (torchrun) are still there."""

    def __init__(self, launcher: int, parent: int) -> None:
        self.launcher, self.parent = launcher, parent
        stat = _proc_stat(launcher)
        self.proc = os.path.isdir("/proc/self")
        self.started = stat[1] if stat else None  # a pid reused after the launcher is reaped has another

    def alive(self) -> bool:
        if os.getppid() != self.parent:  # torchrun died: this process was handed to init or a subreaper
            return False
        if self.proc:
            stat = _proc_stat(self.launcher)
            return stat is not None and stat[0] not in ("Z", "X") and (self.started is None or stat[1] == self.started)
        try:
            os.kill(self.launcher, 0)
        except ProcessLookupError:
            return False
        except OSError:
            return True  # exists, owned by someone else: cannot be ours, but do not guess
        return True

    def end(self) -> None:
        # The message may not get out (the launcher's terminal gone with it, a pipe nobody reads): it gets a second
        threading.Thread(target=lambda: (time.sleep(1.0), os._exit(EXIT_CODE)), daemon=True).start()
        with contextlib.suppress(Exception):
            rank = os.environ.get("RANK", "?")
            print(f"stride train: rank {rank}: the launcher (pid {self.launcher}) is gone; ending this rank at once "
                  f"(exit status {EXIT_CODE}), as the launcher's death ends every process of the run; the same "
                  "command resumes from the newest checkpoint", file=sys.stderr, flush=True)
        os._exit(EXIT_CODE)

    def watch(self, poll_s: float = POLL_S) -> None:
        while True:
            if not self.alive():
                self.end()
            time.sleep(poll_s)


def watch_launcher(env: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """In a rank that `stride train --nproc`'s torchrun started: end with the launcher (see the module's text).

    Idempotent; a no-op (False) anywhere else, e.g. under `torchrun -m stride train` by hand, whose user owns
    torchrun. Called first thing in every rank's `stride train` (stride.cli.train.run)."""
    value = env.get(ENV_LAUNCHER, "")
    in_torchrun = "LOCAL_RANK" in env or "TORCHELASTIC_RUN_ID" in env
    if "thread" in _state or not value.isdigit() or not in_torchrun:
        return False
    set_parent_death_signal(signal.SIGKILL)
    folder = handed_folder(env)
    fd = run_lock.hold_shared(folder) if folder is not None else None
    if fd is not None:  # before the check below: a launch that finds no rank in the folder finds this one dead
        _state["folder_fd"] = fd  # held for the life of this process (close-on-exec)
    line = Lifeline(int(value), os.getppid())
    if not line.alive():
        line.end()
    thread = threading.Thread(target=line.watch, name="stride-lifeline", daemon=True)
    thread.start()
    _state["thread"] = thread
    return True
