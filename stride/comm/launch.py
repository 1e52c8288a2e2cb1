"""Run the benchmark on N local processes (spawned here) or on the ranks torchrun started.

Spawned workers rendezvous over TCP on 127.0.0.1 with a free port, one intra-op thread each, and
rank 0 writes the rows to a JSON file the parent reads (written whole, then renamed).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from stride.comm.bench import Row, run_benchmark


@dataclass
class CommJob:
    collectives: list[str]
    sizes: list[int]
    iters: int
    warmup: int
    backend: str
    budget_bytes: int = 1 << 31
    repeats: int = 1  # timed batches per size; their median (a shared host's noise)


def under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ


PORT_TRIES = 3  # rendezvous ports tried when another process takes the chosen one first
RANK_GRACE_S = 5.0  # seconds a rank has to end on SIGTERM before SIGKILL


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, job: CommJob, out_path: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(job.backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        rows = run_benchmark(job.collectives, job.sizes, job.iters, job.warmup, job.budget_bytes, job.repeats)
        if rank == 0:
            tmp = out_path + ".tmp"
            Path(tmp).write_text(json.dumps([r.to_dict() for r in rows]))
            os.replace(tmp, out_path)
    finally:
        dist.destroy_process_group()


def run_spawned(job: CommJob, nproc: int) -> list[Row]:
    """Spawn `nproc` local ranks, run the job, return rank 0's rows."""
    if nproc < 2:
        raise ValueError(f"--nproc {nproc}: a collective benchmark needs at least 2 processes")
    with tempfile.TemporaryDirectory(prefix="stride-comm-") as d:
        out = os.path.join(d, "rows.json")
        for attempt in range(PORT_TRIES):
            try:
                # the ranks start with Ctrl-C ignored (Python keeps an ignored SIGINT ignored at start-up): a Ctrl-C
                # in the terminal reaches every process of the group, and a rank still importing torch printed its
                # traceback beside this process's one line; this process ends the ranks itself (end_ranks)
                ctx = None
                try:
                    # SIGINT is ignored here while the ranks start (they inherit it) and restored before the wait;
                    # one handler covers both, so no Ctrl-C falls between them with the ranks left running
                    with _sigint_ignored():
                        ctx = mp.start_processes(_worker, args=(nproc, _free_port(), job, out), nprocs=nproc,
                                                 join=False, start_method="spawn")
                    while not ctx.join():
                        pass
                except KeyboardInterrupt:  # Ctrl-C: no rank may outlive this process (the CLI prints one line)
                    end_ranks(ctx.processes if ctx is not None else [])
                    raise
                break
            except mp.ProcessRaisedException as exc:
                # the free port was released before rank 0 bound it, and another process (a second job on a
                # shared host) took it in between: rank 0's store fails with EADDRINUSE before any collective ran
                if "EADDRINUSE" not in str(exc) or attempt == PORT_TRIES - 1:
                    raise
        if not os.path.exists(out):
            raise RuntimeError("stride comm: rank 0 finished without writing its results")
        return [Row(**r) for r in json.loads(Path(out).read_text())]


def end_ranks(ranks: list) -> None:
    """End spawned ranks still running after Ctrl-C. A rank that Ctrl-C reached while it imported torch dies
    there, and the others then wait in the rendezvous inside C++, where SIGINT is only noted: they, and this
    process at exit (multiprocessing joins its children), hung until killed. SIGTERM ends them (Python leaves it
    at its default), SIGKILL any left after RANK_GRACE_S."""
    alive = [r for r in ranks if r.is_alive()]
    # a second Ctrl-C during the grace period must not skip the SIGKILL of a rank that ignores SIGTERM
    with _sigint_ignored():
        for r in alive:
            r.terminate()
        deadline = time.monotonic() + RANK_GRACE_S
        for r in alive:
            r.join(max(0.0, deadline - time.monotonic()))
            if r.is_alive():
                r.kill()
                r.join(1.0)


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """SIGINT ignored for the block, the earlier handler put back after; only in the main thread, where handlers
    can be set (elsewhere the block runs as it is)."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
        yield
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)


def run_torchrun(job: CommJob) -> tuple[list[Row], int, int]:
    """Run on the ranks torchrun started; returns (rows, rank, world)."""
    torch.set_num_threads(1)
    dist.init_process_group(job.backend)
    try:
        rows = run_benchmark(job.collectives, job.sizes, job.iters, job.warmup, job.budget_bytes, job.repeats)
        return rows, dist.get_rank(), dist.get_world_size()
    finally:
        dist.destroy_process_group()
