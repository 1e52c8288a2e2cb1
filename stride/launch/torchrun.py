"""`stride train --nproc N` re-runs itself under torchrun (the elastic agent) instead of forking ranks itself.

torchrun gives restarts (`--max-restarts`), multi-node rendezvous (`--nnodes`, `--rdzv-endpoint`) and
the RANK / WORLD_SIZE / LOCAL_RANK environment the trainer reads. `torchrun -m stride train CONFIG`
works the same way by hand.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from types import FrameType

from stride.config.errors import ConfigError
from stride.files.run_lock import FolderInUse
from stride.launch import lifeline
from stride.launch.script_values import HOST_PORT, check_all, check_pattern


def inside_launcher() -> bool:
    """True in a process torchrun started (it sets these for every worker)."""
    return "LOCAL_RANK" in os.environ or "TORCHELASTIC_RUN_ID" in os.environ


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


def launcher_env(threads: int | None) -> dict[str, str]:
    """The workers' environment: restart-safe rendezvous store, and one thread set per rank."""
    env = dict(os.environ)
    # gloo re-initialisation after a restart is flaky with the shared store (pytorch#135712, FACTS.md)
    env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def run_torchrun(cmd: list[str], env: dict[str, str]) -> int:
    """Run torchrun in the foreground; its exit status is the run's.

    Death: torchrun and every worker end with this process, however it ends (`kill -9` too), within about
    a second and without a final checkpoint or summary (`stride.launch.lifeline`): torchrun gets the
    parent-death signal SIGKILL, and `STRIDE_LAUNCHER_PID` tells each worker whom to outlive by no more
    than that. When `env` hands a run folder to the ranks (`STRIDE_RUN_LOCK`) and a rank of an earlier
    launch still works in it (its launcher was killed a moment ago), nothing starts: exit status 1.

    Signals: this process waits for torchrun however it is stopped, so the workers' final checkpoint is
    never cut short by its parent going away. SIGTERM or SIGUSR1 sent to this process alone (`kill PID`,
    `timeout`) is passed to torchrun's agent as SIGTERM, which it forwards to every worker (the agent
    does not handle SIGUSR1: that signal would end it). torchrun starts with SIGUSR1 ignored, so one sent
    to the whole job does not end the agent either; the workers inherit that until stride's handler
    replaces it. Copies of one stop request reaching a worker directly and through the agent are
    handled as one (`stride.checkpoint.signals.REPEAT_WINDOW_S`).
    """
    folder = lifeline.handed_folder(env)
    if folder is not None and lifeline.ranks_still_in(folder):
        # a refusal like run_lock's (exit 1), returned rather than raised: the caller's `run_lock.held` then
        # leaves the folder as it found it (nothing was written)
        print(f"stride train: run folder {folder} is in use by processes of an earlier `stride train --nproc` whose "
              "launcher is gone (they are ending: the launcher's death ends them): two runs in one folder overwrite "
              "each other's checkpoints and metrics; run the command again in a few seconds", file=sys.stderr)
        return FolderInUse.exit_code
    env = {**env, **lifeline.env_for_ranks()}
    setup = lifeline.child_setup(_ignore_sigusr1)
    proc = subprocess.Popen(cmd, env=env, preexec_fn=setup)  # noqa: PLW1509 (single-threaded CLI)

    def forward(signum: int, frame: FrameType | None) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)

    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGUSR1)}
    interrupted = False
    try:
        while True:
            try:
                code = proc.wait()
                return 130 if interrupted else code
            except KeyboardInterrupt:  # Ctrl-C reached torchrun too: it stops its workers; wait for it
                interrupted = True
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _ignore_sigusr1() -> None:
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)


# Every rank's `stride train` imports this module before it reads its config or touches the run folder
# (stride.cli.train.run): a rank that `run_torchrun` started begins to watch its launcher here (a no-op
# in any other process).
lifeline.watch_launcher()
