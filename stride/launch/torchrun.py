"""`stride train --nproc N` re-runs itself under torchrun (the elastic agent) instead of forking ranks itself.

torchrun gives restarts (`--max-restarts`), multi-node rendezvous (`--nnodes`, `--rdzv-endpoint`) and
the RANK / WORLD_SIZE / LOCAL_RANK environment the trainer reads. `torchrun -m stride train CONFIG`
works the same way by hand.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from types import FrameType

from stride.config.errors import ConfigError
from stride.launch import lifeline
from stride.launch.script_values import HOST_PORT, check_all, check_pattern


def inside_launcher() -> bool:
    """True in a process torchrun started (it sets these for every worker)."""
    return "LOCAL_RANK" in os.environ or "TORCHELASTIC_RUN_ID" in os.environ


# Where a rank `stride train --nproc` started leaves why it refused (exit status 2: a config error, a checkpoint
# that does not fit the config, none valid to resume): torchrun reports any rank's exit as its own failure (exit 1,
# its ChildFailedError traceback), which read like a crash (outside audit 18)
STATUS_DIR_ENV = "STRIDE_LAUNCH_STATUS_DIR"
REFUSED = 2


def _status_file() -> str | None:
    folder, rank = os.environ.get(STATUS_DIR_ENV), os.environ.get("RANK")
    return os.path.join(folder, f"rank{rank}") if folder and rank is not None and rank.isdigit() else None


def record_refusal() -> None:
    """In a rank of `stride train --nproc`: note for the launcher that this rank refused (exit status 2)."""
    if (path := _status_file()) is not None:
        with contextlib.suppress(OSError), open(path, "w") as f:
            f.write(str(REFUSED))  # (the launcher's folder gone: it falls back to torchrun's report)


def clear_refusal() -> None:
    """At a rank's start: a refusal noted by this rank in an earlier attempt (torchrun's --max-restarts) is not this
    attempt's (outside review: a later crash read as that refusal)."""
    if (path := _status_file()) is not None:
        with contextlib.suppress(OSError):
            os.remove(path)


def _refused_ranks(folder: str) -> list[int]:
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted(int(n[4:]) for n in names if n.startswith("rank") and n[4:].isdigit())


def torchrun_command(
    train_args: list[str],
    *,
    nproc: int,
    nnodes: int = 1,
    rdzv_endpoint: str | None = None,
    max_restarts: int = 0,
    node_rank: int | None = None,
) -> list[str]:
    """The torchrun command line that runs `stride train <train_args>` on `nproc` ranks per node."""
    bad = [f"{flag} {value} must be >= {low}" for flag, value, low in
           (("--nproc", nproc, 1), ("--nnodes", nnodes, 1), ("--max-restarts", max_restarts, 0)) if value < low]
    if bad:
        raise ConfigError("; ".join(bad))
    if nnodes > 1 and not rdzv_endpoint:
        raise ConfigError(f"--nnodes {nnodes} needs --rdzv-endpoint HOST:PORT (the same on every node)")
    check_pattern(rdzv_endpoint, HOST_PORT, "--rdzv-endpoint", "HOST:PORT")
    check_all(train_args, "an argument of stride train")
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", f"--nnodes={nnodes}",
           f"--max-restarts={max_restarts}"]
    if rdzv_endpoint:
        cmd += ["--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv_endpoint}"]
        if node_rank is not None:
            cmd.append(f"--node-rank={node_rank}")
    else:
        cmd.append("--standalone")  # one node: a local rendezvous on a free port
    return [*cmd, "-m", "stride", "train", *train_args]


RESTART_COUNT_ENV = "TORCHELASTIC_RESTART_COUNT"  # torchrun's restarts so far, in each worker's environment


def restarted(env: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """True in a rank torchrun started again after a failure (--max-restarts): its attempt continues the run the first
    one started, so the first attempt's --overwrite is not this one's (it replaced the run, checkpoints included, at
    every restart: a rank killed at step 12 of 30 with a checkpoint at 10 was redone from step 0)."""
    count = env.get(RESTART_COUNT_ENV, "0")
    return count.isdigit() and int(count) > 0


def restart_problem(checkpoints: bool, max_restarts: int, resume: str = "auto") -> str | None:
    """Why `--max-restarts` cannot restart this run, or None. A restart continues the run in its folder from the
    newest checkpoint; without checkpoints (or with checkpoint.resume = "never") the folder holds the failed attempt's
    metrics.jsonl, and every restart was refused (exit status 2, 'nothing was trained or written past the refusal'
    after an attempt that trained)."""
    if max_restarts <= 0 or (checkpoints and resume == "auto"):
        return None
    setting = "checkpoint.enabled is false" if not checkpoints else f'checkpoint.resume is "{resume}"'
    fix = ("--set checkpoint.enabled=true (checkpoint.every sets how many steps a restart redoes)" if not checkpoints
           else "--set checkpoint.resume=auto")
    return (f"--max-restarts {max_restarts}: a restart continues the run from its newest checkpoint, and {setting}, "
            "so every restart would be refused (the run folder holds the failed attempt's records); add "
            f"{fix}, or drop --max-restarts")


def new_run_folder(out_dir: str | os.PathLike[str], name: str) -> str:
    """A new `<out_dir>/<stamp>-<name>[-i]`, the folder `stride train` makes without --out, made here by the launcher
    and handed to the ranks as their --out, so that every attempt of torchrun's --max-restarts shares it: each
    attempt's rank 0 made a folder of its own, and a restart began the run again from step 0 in a second folder.
    Made as RunDir.create makes it (a folder it cannot make is a RunDirError naming it, exit status 1 or 2); the
    caller removes it again if no attempt wrote in it (`remove_if_empty`)."""
    from stride.metrics.run_dir import make_run_folder

    return os.fspath(make_run_folder(out_dir, name))


def remove_if_empty(path: str | os.PathLike[str]) -> None:
    """Remove the launcher's own run folder (`new_run_folder`) where no attempt wrote in it: every rank refused the
    config, and the refusal says nothing was written (it left an empty stamped folder in runs/)."""
    with contextlib.suppress(OSError):  # not empty (a rank wrote), or gone: left as it is
        os.rmdir(path)


# `stride train --nproc --overwrite`: the first attempt's rank 0 replaces the run in --out once the config has passed
# every rank's checks (the launcher replaced it before any rank had looked at the config: a config the ranks refused
# left the old run deleted). It notes the replacement in the launcher's status folder, which outlives the attempts of
# --max-restarts, so that a restart continues the run that replacement started instead of replacing it again.
REPLACED_NAME = "replaced"


def overwrite_applies(env: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Whether this rank's `--overwrite` is still to be done. The first attempt: yes. A restart (--max-restarts) on one
    node under `stride train --nproc`: only if no earlier attempt replaced the run (it ended before rank 0 got that
    far). Any other restart (torchrun by hand, --nnodes > 1, where rank 0 may be on another node than the one that
    replaced it): no, as `restarted`."""
    if not restarted(env):
        return True
    folder = env.get(STATUS_DIR_ENV)
    one_node = env.get("WORLD_SIZE") is not None and env.get("WORLD_SIZE") == env.get("LOCAL_WORLD_SIZE")
    return bool(folder) and one_node and not os.path.exists(os.path.join(folder, REPLACED_NAME))


def note_replaced() -> bool:
    """In rank 0 of `stride train --nproc`, after it replaced the run: tell later attempts (`overwrite_applies`). False
    where there is no launcher's folder to tell (torchrun by hand: restarts go by `restarted` alone)."""
    folder = os.environ.get(STATUS_DIR_ENV)
    if not folder:
        return False
    with contextlib.suppress(OSError), open(os.path.join(folder, REPLACED_NAME), "w") as f:
        f.write("1")
        return True
    return False


def launcher_env(threads: int | None) -> dict[str, str]:
    """The workers' environment: restart-safe rendezvous store, and one thread set per rank."""
    env = dict(os.environ)
    # gloo re-initialisation after a restart is flaky with the shared store (pytorch#135712, FACTS.md)
    env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


# Idle cores of the launcher's affinity just before torchrun starts, for the ranks' `parallel.pin_ranks = "auto"`
# (stride.train.rank_cores): a rank pinned to a core another process keeps busy cannot move off it, and its partner
# waits for it at every collective. 2 ranks of a tiny FSDP2 model on 2 cores beside a test suite (load 2-7.5): median
# 108 ms a step pinned (83-304) against 87 ms unpinned (72-136); beside one steady busy process pinning still won,
# 80.8 against 90.8 ms (docs/parallel.md). Read from /proc/stat over IDLE_WINDOW_S.
HOST_IDLE_ENV = "STRIDE_HOST_IDLE_CORES"
IDLE_WINDOW_S = 0.3


def _cpu_times() -> dict[int, tuple[int, int]]:
    """Per CPU: (idle jiffies, all jiffies) from /proc/stat; {} where there is none."""
    out: dict[int, tuple[int, int]] = {}
    try:
        with open("/proc/stat") as f:
            lines = f.read().splitlines()
    except OSError:
        return out
    for line in lines:
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and len(fields) >= 5 and all(x.isdigit() for x in fields):
            vals = [int(x) for x in fields[:8]]
            out[int(name[3:])] = (vals[3] + vals[4], sum(vals))  # idle + iowait; user .. steal
    return out


def idle_cores(window_s: float = IDLE_WINDOW_S) -> float | None:
    """Cores of this process's affinity that sat idle over the next `window_s` (0.0 .. their count); None off Linux."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    before = _cpu_times()
    if not cpus or not before:
        return None
    time.sleep(window_s)
    after = _cpu_times()
    idle = 0.0
    for c in cpus:
        if c not in before or c not in after or after[c][1] <= before[c][1]:
            return None
        idle += (after[c][0] - before[c][0]) / (after[c][1] - before[c][1])
    return idle


def run_torchrun(cmd: list[str], env: dict[str, str], measure_idle: bool = True) -> int:
    """Run torchrun in the foreground; its exit status is the run's.

    Death: torchrun and every worker end with this process, however it ends (`kill -9` too), within about
    a second and without a final checkpoint or summary (`stride.launch.lifeline`): torchrun gets the
    parent-death signal SIGKILL, and `STRIDE_LAUNCHER_PID` tells each worker whom to outlive by no more
    than that. A rank of an earlier launch that still works in the run folder (its launcher was killed a
    moment ago) makes the caller's `run_lock.held` refuse the folder before this runs (`run_lock.ranks_still_in`).

    Signals (`_Stop`): SIGTERM, SIGUSR1 and SIGINT (Ctrl-C) sent to this process, alone or with its process
    group, stop the run as they stop a single-process `stride train`: the ranks save one final checkpoint
    and exit 0, and so do torchrun and this process. torchrun runs in a session of its own, so neither a
    signal to this process's group nor Ctrl-C reaches its agent, which would end its workers itself, print
    its `SignalException` and exit 1; this process hands the signal to each worker instead, and the agent
    sees them all finish. torchrun also starts with SIGUSR1 ignored (its agent does not handle it), which
    its workers inherit until stride's handler replaces it.
    """
    # before torchrun and its ranks load the cores themselves; only where a rank reads it (`parallel.pin_ranks` =
    # "auto", two ranks or more on this node): otherwise IDLE_WINDOW_S of start-up for nothing
    nproc = _nproc_of(cmd)
    idle = idle_cores() if measure_idle and (nproc is None or nproc >= 2) else None
    status = tempfile.TemporaryDirectory(prefix="stride-launch-")
    env = {**env, **lifeline.env_for_ranks(), STATUS_DIR_ENV: status.name}
    if idle is not None:
        env[HOST_IDLE_ENV] = f"{idle:.2f}"
    stop = _Stop(_nproc_of(cmd))
    previous = stop.install()  # before torchrun starts: a signal from now on is the run's
    try:
        setup = lifeline.child_setup(_ignore_sigusr1)
        stop.proc = subprocess.Popen(cmd, env=env, preexec_fn=setup,  # noqa: PLW1509 (single-threaded CLI)
                                     start_new_session=True)
        stop.started()
        watch = _RankWatch(stop.nproc, _int_option(cmd, "--max-restarts="))
        while True:  # in short waits: a blocking waitpid runs no handler for a signal another thread took
            watch.poll(stop.proc.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = stop.proc.wait(timeout=WATCH_S)
                if stop.code is not None:
                    return stop.code
                refused = _refused_ranks(status.name) if code != 0 else []
                if refused and (not watch.gone or int(watch.gone[0]) in refused):
                    # the rank that ended the job refused: its reason is above; the run's status is the refusal's
                    print(f"stride train: rank{'s' if len(refused) > 1 else ''} {', '.join(map(str, refused))} "
                          f"refused (the reason is above; torchrun's report of it as a failed child is not a crash): "
                          f"nothing was trained or written past the refusal (exit status {REFUSED})",
                          file=sys.stderr, flush=True)
                    return REFUSED
                if code != 0 and (line := watch.failure_line(code)):
                    print(line, file=sys.stderr, flush=True)
                return code
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        status.cleanup()


class _Stop:
    """The launcher's handler of SIGTERM, SIGUSR1 and SIGINT (see `run_torchrun`).

    The first: handed, as it came, to every worker of torchrun (each rank's handler, stride.checkpoint.signals,
    takes it; the ranks agree on a step, save it, exit 0). Where the workers cannot take it yet (starting
    up, or running without `checkpoint.enabled` / `checkpoint.save_on_signal`), it ends the run at once, as
    it ends a single process then: no checkpoint, exit status 128 + the signal's number. Later ones within
    `repeat_window` of the first (5 s; 1 s for SIGINT) are copies of it (`timeout` signals the launcher and
    its group) and change nothing. One after that, a second Ctrl-C say, ends the run at once in the same
    way, without a final checkpoint (a save under way is never loaded: it has no manifest); the same command
    resumes from the newest committed checkpoint.

    Where there is no /proc to find the workers (not Linux), the first is passed to torchrun's agent as
    SIGTERM, which forwards it to every worker and exits 1 when they are done.
    """

    signals = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)

    def __init__(self, nproc: int | None) -> None:
        from stride.checkpoint.signals import repeat_window  # here, not in the handler: it would wait for the import

        self.repeat_window = repeat_window
        self.nproc = nproc
        self.proc: subprocess.Popen[bytes] | None = None
        self.first: int | None = None
        self.first_at = 0.0
        self.code: int | None = None  # this process's exit status once it has ended the run itself
        self.early = False  # the first came before torchrun was started

    def install(self) -> dict[int, object]:
        """Take the signals (main thread only); the handlers there were before, to put back."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous = {}
        for sig in self.signals:
            if sig == signal.SIGINT and signal.getsignal(sig) == signal.SIG_IGN:
                continue  # started with Ctrl-C ignored (`cmd &` in a script): ignored, as Python does
            previous[sig] = signal.signal(sig, self)
        return previous

    def started(self) -> None:
        if self.early and self.first is not None and self.code is None:  # a signal while torchrun was starting
            self._end(self.first, f"{_name(self.first)} before the ranks started")

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if self.code is not None:
            return  # already ending
        if self.first is None:
            self.first, self.first_at = signum, now
            if self.proc is None:
                self.early = True
            else:
                self._hand_on(signum)
        elif now - self.first_at > self.repeat_window(signum):
            self._end(signum, f"{_name(signum)} {now - self.first_at:.1f} s after {_name(self.first)}")

    def _hand_on(self, signum: int) -> None:
        assert self.proc is not None
        workers = _children(self.proc.pid)
        if workers is None:  # no /proc: torchrun's agent forwards it to its workers
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            return
        takes = (signal.SIGTERM, signal.SIGUSR1, signum)  # stride's handler takes all its signals at once
        if not workers or (self.nproc is not None and len(workers) != self.nproc) or \
                not all(_catches(pid, takes) for pid in workers):
            self._end(signum, f"{_name(signum)} before the ranks could take it (starting up, or running without "
                              "checkpoint.enabled and checkpoint.save_on_signal)")
            return
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def _end(self, signum: int, why: str) -> None:
        """End torchrun and its workers now (SIGKILL, as the launcher's death would); exit 128 + signum."""
        assert self.proc is not None
        self.code = 128 + signum
        print(f"stride train: {why}: ending torchrun and its ranks now, without waiting for a final checkpoint "
              f"(exit status {self.code}); the same command resumes from the newest committed checkpoint, if any",
              file=sys.stderr, flush=True)
        workers = _children(self.proc.pid) or []
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()  # first, so that its agent does not see a worker die and report it
        for pid in workers:  # dead with torchrun already (parent-death signal); here too where there is none
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# The launcher's wait between looks at torchrun and its workers. torchrun's agent looks every 0.1 s
# (--monitor-interval) and then gives the other ranks SIGTERM and time to end: a first rank's end is seen between.
WATCH_S = 0.1


class _RankWatch:
    """Which rank's process ended first while torchrun ran: after a failure torchrun prints its agent's traceback and
    the survivors' (gloo's "Connection reset by peer" for a rank killed with SIGKILL), and no line said which rank
    went first or what to do next (outside audit 11, F4). Polled at the launcher's wait (WATCH_S): /proc is listed
    only until every worker is known (its RANK read from /proc/PID/environ), then only their stat files are read
    (a few microseconds each)."""

    def __init__(self, nproc: int | None, max_restarts: int | None = None) -> None:
        self.nproc = nproc
        self.max_restarts = max_restarts
        self.live: dict[int, str] = {}  # worker pid -> its RANK
        # ranks of the newest attempt whose process ended while torchrun ran, in the order seen: an earlier attempt's
        # (--max-restarts) are not what ended the job; its last line named attempt 1's killed rank 1 where attempt
        # 2's rank 0 had ended it
        self.gone: list[str] = []
        self.attempt = 0  # the newest workers' TORCHELASTIC_RESTART_COUNT (torchrun's restarts so far)
        self.started = self.listed = time.monotonic()

    def poll(self, torchrun_pid: int) -> None:
        now = time.monotonic()
        # /proc is listed at every look for the first seconds (the workers start), then once a second: a launch
        # that waits minutes for other nodes' rendezvous lists it ~10x less often
        if (self.nproc is None or len(self.live) + len(self.gone) < self.nproc) and \
                (now - self.started < 5.0 or now - self.listed >= 1.0):
            self.listed = now
            for pid in _children(torchrun_pid) or []:
                if pid not in self.live and (rank := _env_value(pid, "RANK")) is not None:
                    attempt = _env_value(pid, RESTART_COUNT_ENV) or "0"
                    if attempt.isdigit() and int(attempt) > self.attempt:  # torchrun restarted the workers
                        self.attempt, self.gone = int(attempt), []
                    self.live[pid] = rank
        ended = [pid for pid in self.live if (lifeline.proc_stat(pid) or ["X"])[0] in ("Z", "X")]
        if ended and len(ended) < len(self.live):  # all at once is the run's end, not one rank's failure
            self.gone += sorted((self.live[pid] for pid in ended), key=int)
        for pid in ended:
            del self.live[pid]

    def failure_line(self, code: int) -> str | None:
        """One line for a failed launch, or None where no rank was seen to end before the others."""
        if not self.gone:
            return None
        first = self.gone[0]
        restarts = ""
        if self.attempt:
            left = " (--max-restarts used up)" if self.max_restarts == self.attempt else ""
            restarts = f" after {self.attempt} restart{'s' if self.attempt > 1 else ''}{left}"
        return (f"stride train: rank {first} ended first while the other ranks ran{restarts} (killed, or it failed: "
                f"torchrun's report above gives its exit code), so the job stopped (torchrun exit status {code}); fix "
                "what ended it, then the same command resumes from the newest committed checkpoint, if any")


def _env_value(pid: int, key: str) -> str | None:
    """A variable of process `pid`'s environment as it started (/proc/PID/environ), or None."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            items = f.read().split(b"\0")
    except OSError:
        return None
    prefix = key.encode() + b"="
    return next((item[len(prefix):].decode(errors="replace") for item in items if item.startswith(prefix)), None)


def _name(signum: int) -> str:
    return signal.Signals(signum).name


def _nproc_of(cmd: list[str]) -> int | None:
    """The workers per node in a `torchrun_command` line."""
    return _int_option(cmd, "--nproc-per-node=")


def _int_option(cmd: list[str], prefix: str) -> int | None:
    """The whole-number value of torchrun's `prefix` option (`--max-restarts=`) in `cmd`, or None."""
    for arg in cmd:
        if arg.startswith(prefix):
            value = arg.split("=", 1)[1]
            return int(value) if value.isdigit() else None
    return None


def _children(pid: int) -> list[int] | None:
    """The live child processes of `pid` (torchrun's: its workers), or None where there is no /proc."""
    if not os.path.isdir("/proc/self"):
        return None
    found = []
    for entry in os.listdir("/proc"):
        fields = lifeline.proc_stat(int(entry)) if entry.isdigit() else None  # state, ppid, ...
        if fields and len(fields) > 1 and fields[1] == str(pid) and fields[0] not in ("Z", "X"):
            found.append(int(entry))
    return found


def _catches(pid: int, signums: tuple[int, ...]) -> bool:
    """True when process `pid` has a handler for every one of `signums` (/proc/PID/status SigCgt)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            line = next((ln for ln in f if ln.startswith("SigCgt:")), "")
    except OSError:
        return False
    try:
        mask = int(line.split()[1], 16)
    except (IndexError, ValueError):
        return False
    return all(mask >> (s - 1) & 1 for s in signums)


def _ignore_sigusr1() -> None:
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
