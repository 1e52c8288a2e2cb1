"""Run a sweep: pack the points that are not finished, train the packs here or as Ray tasks, record each point.

Packs are planned per compatibility class (stride.sweep.packing): `--pack N` packs N models (checked against
the memory model), `--pack auto` asks the throughput probe (stride.sweep.sizing), and a class of points that
packed training does not support runs one by one under `auto` (a clear error under `--pack N`). A class of
M points with pack size N becomes ceil(M / N) packs of nearly equal size.

On Ray each pack is one task (`ray.remote`, `--cpus-per-pack` CPUs): Ray places and runs them, we only wait
for them; there is no scheduler here. Results come back to this process, which writes each point as its
task returns (locally: as each model stops). Every pack's wall time is appended to DIR/packs.jsonl for the
report's cost figures; on Ray it is the task's own, from when the pack started running (timed from submission,
a pack queued behind others had its wait counted as device time). `--ray-address` is checked (Ray installed, the
address well formed and listening) before the solo measurement and the probe, which took up to a minute before
the refusal. A packs.jsonl line that parses but is not a pack's record is one line naming the file and line.
A pack (or a class, while sized, probed or timed alone) whose training raises anything but a ConfigError fails its
unfinished points only, alike on both backends (jobs.run_job_caught, Recorder.failure): recorded in DIR/failed/, the
other packs run, and `run` ends with a SweepError saying how many failed (exit status 1) after all of them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stride.config import RunConfig
from stride.config.errors import ConfigError
from stride.files.input_file import InputFileError, InputFileMissing, read_input_bytes
from stride.files.strict_json import finite_number
from stride.metrics.contention import CONTENTION_RECORD, WaitClock
from stride.sweep.grid import Point
from stride.sweep.jobs import PackJob, failure_of, pack_reading, ray_job, run_job, run_job_caught
from stride.sweep.packed_model import chunk_bounds
from stride.sweep.packing import check_packable, pack_key, split_keys
from stride.sweep.sizing import SoloRate, check_fits, measure_solo, probe
from stride.sweep.store import PACK_LOG_MAX_BYTES, SweepFileError, SweepStore


class SweepError(RuntimeError):
    """A sweep that cannot go on (an unreachable Ray cluster, failed packs): one line, finished points kept."""


@dataclass
class Options:
    pack: str | int = "auto"
    backend: str = "local"  # local | ray
    ray_address: str | None = None  # None: a Ray cluster on this machine, started for the sweep
    cpus_per_pack: int = 1
    probe_s: float = 60.0
    chunk: int | None = None  # models a packed step trains at once; None: the device default, lowered to fit memory
    log: Callable[[str], None] = field(default=lambda msg: print(f"stride sweep: {msg}", file=sys.stderr, flush=True))
    stop: Callable[[], None] | None = None  # the stop request's check (stride.sweep.stop): raises to stop the sweep
    retake: Callable[[], None] | None = None  # takes the stop signals back after ray.init set its own SIGTERM handler


@dataclass
class ClassPlan:
    """How one compatibility class of points runs."""

    size: int
    solo: SoloRate | None  # the lone model's rate (the probe's, or measured before the packs run)
    why: str
    chunk: int | None = None  # models a step of its packs trains at once
    packed: bool = False  # a pack of one that still trains packed (a lone point with dropout: plan_jobs)
    failure: dict[str, str] | None = None  # its probe or lone-model run raised (jobs.failure_of): its points failed


def plan_jobs(points: list[Point], store: SweepStore, opts: Options, start_index: int = 0
              ) -> tuple[list[PackJob], dict[str, ClassPlan]]:
    """The packs for `points` (the unfinished ones) and, per class, its size and solo throughput."""
    classes: dict[str, list[Point]] = {}
    for p in points:
        classes.setdefault(pack_key(p.config), []).append(p)
    for members in classes.values():  # before any class is probed or trained
        check_builds(members[0])
    if len(classes) > 1:
        keys = split_keys([c[0].config for c in classes.values()])
        opts.log(f"{len(classes)} packing classes: the points differ in {', '.join(keys)} (keys that change shapes "
                 "or the shared setup never share a pack)")
    jobs: list[PackJob] = []
    plans: dict[str, ClassPlan] = {}
    for key, members in classes.items():
        cfg = members[0].config
        try:
            check_packable(cfg)
            packable = ""
        except ConfigError as exc:
            if isinstance(opts.pack, int) and opts.pack > 1:
                raise
            packable = str(exc)
        mem = None
        if packable or len(members) == 1 or opts.pack == 1:
            why = packable or ("one point" if len(members) == 1 else "--pack 1")
            plan = ClassPlan(1, None, why)
            if why == "one point" and any(p.config.model.dropout > 0 for p in members):
                # a lone point with dropout (the last of a resumed sweep's class) trains packed, as a pack of one:
                # its masks come from its own generator as in any pack, where the Trainer's would be other draws
                plan = ClassPlan(1, None, "one point, packed: its dropout masks as in any pack", packed=True)
        elif opts.pack == "auto":  # trains packs of 2, 4, 8, ... models: said first (it ran 7-35 s without a word)
            opts.log(f"{len(members):,} point(s) of `{cfg.model.name}`: probing pack sizes (up to about "
                     f"{opts.probe_s:g} s, --probe-s; --pack N skips the probe)")
            try:
                pr = probe(cfg, len(members), opts.probe_s, chunk=opts.chunk, check=opts.stop)
                plan, mem = ClassPlan(pr.size, pr.solo, pr.why), pr.memory
            except ConfigError:
                raise
            except Exception as exc:  # noqa: BLE001 (the model's own training raised: a failure of its points)
                plan = _failed_class(cfg, len(members), "probing pack sizes", exc, opts.log)
        else:
            plan = ClassPlan(min(int(opts.pack), len(members)), None, f"--pack {opts.pack}")
        if plan.size > 1 and plan.failure is None:  # the chunk of its largest pack that fits (or one line why not)
            try:  # builds the model and runs it on one batch (its activations)
                plan.chunk = check_fits(cfg, plan.size, mem, opts.chunk)[1]
            except ConfigError:
                raise
            except Exception as exc:  # noqa: BLE001 (the model's own build or forward raised)
                plan = _failed_class(cfg, len(members), "sizing its packs (memory model)", exc, opts.log)
        plans[key] = plan
        n_packs = math.ceil(len(members) / plan.size)
        for k in range(n_packs):
            part = members[k * len(members) // n_packs : (k + 1) * len(members) // n_packs]
            jobs.append(PackJob(start_index + len(jobs), [p.id for p in part], [p.config for p in part],
                                plan.size == 1 and not plan.packed, str(store.root), plan.chunk))
        if plan.failure is None:  # a failed class said so (_failed_class): none of its packs runs
            opts.log(f"{len(members)} point(s) of `{cfg.model.name}` in {n_packs} pack(s) of up to {plan.size}"
                     f"{_chunks_text(-(-len(members) // n_packs), plan.chunk)} ({plan.why})")
    return jobs, plans


def _failed_class(cfg: RunConfig, n: int, doing: str, exc: Exception, log: Callable[[str], None]) -> ClassPlan:
    """A class whose own training raised before its packs ran (the probe's or the lone model's run): its points are
    recorded as failed (`run`) and the other classes go on, as for a pack that raises. Before, the error ended the
    sweep with a traceback before any pack ran."""
    failure = failure_of(exc)
    log(f"{n} point(s) of `{cfg.model.name}`: FAILED while {doing}: {failure['error']}")
    return ClassPlan(n, None, f"failed while {doing}", failure=failure)  # one record of all its points


def check_builds(p: Point) -> None:
    """A ConfigError naming the grid point when its model's builder refuses its config (heads that do not divide
    `model.d_model`): the model is built on the meta device (shapes only, milliseconds), once a packing class, as
    `stride train` checks it. Such a config passes the grid's checks (`validate_relations`) and failed only when
    its class came to train: `--grid model.d_model=32,30 --pack 1` trained the d_model=32 points, then stopped
    with the builder's line, naming no point, and the same command again stopped there again."""
    from stride.train.resources import estimate_memory

    try:
        estimate_memory(p.config, data=False)
    except ConfigError as exc:
        raise ConfigError(f"--grid point {p.label}: {exc}; checked before any point of the sweep trains") from None


def _chunks_text(largest: int, chunk: int | None) -> str:
    """The chunks the largest pack really trains in, as chunk_bounds splits it (nearly equal): `--chunk 16` on a
    pack of 18 is 2 chunks of 9, which the line gave as "16 models a step"."""
    if not chunk or chunk >= largest:
        return ""
    sizes = sorted({hi - lo for lo, hi in chunk_bounds(largest, chunk)})
    return f", {len(chunk_bounds(largest, chunk))} chunks of {'-'.join(map(str, sizes))} models a step"


def one_by_one_rates(points: list[Point], plans: dict[str, ClassPlan],
                     log: Callable[[str], None] | None = None,
                     check: Callable[[], None] | None = None) -> dict[str, SoloRate]:
    """Each packed class's model trained alone: the probe's measurement, or one taken now (`measure_solo`: warmed
    up, then timed windows of at least 0.3 s in all, their median; it read 5.7k-27k samples/s where 60-step runs
    read 19k-31k when it timed 3 steps of a fresh process's first Trainer, and the speed-up read 1.6-12x)."""
    out = {}
    for key, plan in plans.items():
        if plan.solo is None and plan.size > 1 and plan.failure is None:
            members = [p for p in points if pack_key(p.config) == key]
            try:
                plan.solo = measure_solo(members[0].config)
            except ConfigError:
                raise
            except Exception as exc:  # noqa: BLE001 (the model's own training raised: a failure of its points)
                failed = _failed_class(members[0].config, len(members), "timing the lone model", exc,
                                       log or (lambda _: None))
                plan.failure, plan.why = failed.failure, failed.why
                continue
            if check is not None:
                check()
        if plan.solo is not None and plan.solo.samples_per_s:
            out[key] = plan.solo
            if log is not None and plan.size > 1:
                log(f"one by one, for the speed-up: {plan.solo.describe()}")
    return out


class Recorder:
    """Writes each finished point (and each pack's timing) into the sweep directory."""

    def __init__(self, store: SweepStore, points: list[Point], rates: dict[str, SoloRate],
                 log: Callable[[str], None]) -> None:
        self.store, self.log, self.rates = store, log, rates
        self.by_id = {p.id: p for p in points}
        self.written = 0
        self.failed: list[str] = []  # points whose pack raised, in order
        self.failed_packs: list[str] = []  # "pack K: error" of each failed pack

    def failure(self, job: PackJob, items: list[dict[str, Any]], failure: dict[str, str]) -> None:
        """A pack that raised: each of its points it had not finished is recorded as failed (DIR/failed/<id>.json, the
        traceback in DIR/failed/pack-<k>.txt) and said in one line; a rerun of the same command trains them again (they
        have no point file). The same for both backends (jobs.run_job_caught)."""
        tb = self.store.write_traceback(job.index, failure["traceback"])
        finished = {it["id"] for it in items}
        self.failed_packs.append(f"pack {job.index}: {failure['error']}")
        for pid in job.ids:
            if pid in finished:  # finished before the error (a member that stopped earlier): kept as a point
                continue
            p = self.by_id[pid]
            self.store.write_failure(pid, {"id": pid, "label": p.label, "values": p.values, "pack": job.index,
                                           "error": failure["error"], "traceback": str(tb), "time": time.time()})
            self.failed.append(pid)
            self.log(f"point {pid} ({p.label}): FAILED in pack {job.index}: {failure['error']} (traceback: {tb})")

    def failed_text(self, total: int) -> str:
        """The sweep's last line when packs failed (exit status 1), the same on both backends."""
        packs = "; ".join(self.failed_packs[:3]) + ("; ..." if len(self.failed_packs) > 3 else "")
        return (f"{len(self.failed)} of {total} point(s) FAILED, in {len(self.failed_packs)} pack(s) ({packs}); each "
                f"failed point's error is in {self.store.root / 'failed'}/<id>.json, its pack's traceback in "
                f"pack-<k>.txt there; trained {self.written} point(s), kept: run the same command again to retry the "
                "failed and unfinished points")

    def one_by_one_s(self, p: Point, item: dict[str, Any]) -> float | None:
        """The point's training time alone: measured when it ran alone, else its steps at the class's solo
        throughput (training steps only: validation, data set-up and start-up are not in the estimate). A lone
        point's is its training steps' time, as `pack` counts it: its wall time (validation and warm-up in) made
        a sweep that packed nothing "1.17x faster on training steps" than itself."""
        s = item["summary"]
        if item["mode"] == "solo" or item["pack"]["size"] == 1:  # a pack of one ran alone too
            return _train_s(s)
        rate = self.rates.get(pack_key(p.config))
        if rate is None or s.get("steps") is None:
            return None
        return s["steps"] * p.config.train.batch_size / rate.samples_per_s

    def one_by_one_method(self, p: Point, item: dict[str, Any]) -> str | None:
        """How `one_by_one_s` was found, for a reader to judge it."""
        if item["mode"] == "solo":
            return "measured: the point trained alone"
        if item["pack"]["size"] == 1:
            return "measured: the point trained alone (a pack of one)"
        rate = self.rates.get(pack_key(p.config))
        return f"its steps at {rate.describe()}" if rate is not None else None

    def point(self, item: dict[str, Any]) -> None:
        p = self.by_id[item["id"]]
        result = {"id": p.id, "label": p.label, "values": p.values, "plan_config_hash": self.store.plan_hash(p.id),
                  "mode": item["mode"], "pack": item["pack"],
                  "summary": item["summary"], "history": item["history"], "run_dir": item.get("run_dir"),
                  "one_by_one_s": self.one_by_one_s(p, item), "one_by_one_method": self.one_by_one_method(p, item)}
        self.store.write(p.id, result, item.get("state"))
        self.written += 1
        s = item["summary"]
        val = s.get("final_val_loss")
        self.log(f"point {p.id} ({p.label}): {s.get('status', 'done')} after {s.get('steps')} steps, val loss "
                 f"{'-' if val is None else f'{val:.4f}'}")

    def pack(self, job: PackJob, items: list[dict[str, Any]], wall_s: float, backend: str,
             error: str | None = None, waiting: float | None = None, other: float | None = None) -> None:
        """Append the pack's timing: its wall time (set-up and validation included) and its training steps' time;
        `waiting`, `other`: its run-queue wait and other processes' cores (stride.sweep.jobs.pack_reading)."""
        if job.solo:  # points one after another: their step times add up
            train_s = sum(_train_s(it["summary"]) for it in items)
        else:  # one pack: its steps are every member's
            train_s = max((_train_s(it["summary"]) for it in items), default=0.0)
        first = self.by_id.get(job.ids[0]) if job.ids else None
        rate = None if job.solo or first is None else self.rates.get(pack_key(first.config))
        line = json.dumps({"index": job.index, "ids": job.ids, "size": len(job.ids), "solo": job.solo,
                           "wall_s": wall_s, "train_s": train_s, "backend": backend, "error": error,
                           "time": time.time(), "one_by_one_rate": rate.as_dict() if rate else None,
                           # threads waiting for a core while the pack ran, all of this process's, its own
                           # lanes' waits on each other too (CPU packs; None: not measured) ...
                           "waiting_threads": waiting,
                           # ... and the cores' worth other processes used on its cores meanwhile: the wait is put
                           # on them only up to this (metrics.contention.foreign_wait; None: not measured)
                           "other_processes_cores": other}) + "\n"
        with open(self.store.root / "packs.jsonl", "a+b") as f:
            end = f.seek(0, os.SEEK_END)
            cut = end > 0 and (f.seek(end - 1), f.read(1))[1] != b"\n"  # a line cut by a kill: end it first
            f.write((b"\n" if cut else b"") + line.encode())


def _train_s(s: dict[str, Any]) -> float:
    if s.get("train_time_s") is not None:
        return float(s["train_time_s"])
    return float((s.get("step_time_s") or 0.0) * (s.get("steps") or 0))


def run_local(jobs: list[PackJob], rec: Recorder, stop: Callable[[], None] | None = None) -> None:
    for job in jobs:
        if stop is not None:
            stop()
        t0 = time.perf_counter()
        clock = WaitClock.started()
        items, failure = run_job_caught(job, on_point=rec.point, check=stop, run=run_job)
        read = pack_reading(job, clock)
        if failure is not None:  # recorded, and the next packs go on (as on Ray)
            rec.failure(job, items, failure)
        rec.pack(job, items, time.perf_counter() - t0, "local", failure["error"] if failure else None,
                 waiting=read["waiting_threads"], other=read["other_processes_cores"])


def _reachable(address: str, timeout: float = 5.0) -> None:
    """A SweepError naming the address when nothing listens there (before Ray's own long retries)."""
    host_port = address.split("://", 1)[-1]
    host, _, port = host_port.rpartition(":")
    if not host or not port.isdigit():
        raise SweepError(f"--ray-address {address!r}: expected host:port, ray://host:port or auto")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as exc:
        raise SweepError(f"the Ray cluster at {address} is not reachable ({exc.strerror or exc}); start it "
                         "(ray start --head) or leave out --ray-address to run one on this machine") from None


def check_ray(opts: Options) -> Any:
    """The ray module, once Ray is importable and `--ray-address` (if given) is well formed and listening: asked
    before the solo measurement and the probe, so a wrong address is refused at once, not after them."""
    try:
        import ray
    except ImportError as exc:
        from stride.launch.ray_train import INSTALL_HINT

        raise SweepError(f"--backend ray needs Ray ({exc}); install it with: {INSTALL_HINT}") from None
    if opts.ray_address not in (None, "auto") and not ray.is_initialized():
        _reachable(opts.ray_address)
    return ray


RAY_POLL_S = 0.5  # how often the driver, waiting for Ray tasks, looks at the stop request


def task_threads(configs: list[RunConfig], cpus: int) -> None:
    """As `stride launch ray`: a Ray task's torch threads are the CPUs Ray reserved for it (`--cpus-per-pack`), where
    `train.threads` is not set. Set before the packs are planned, so the probe and the lone model's rate (the
    speed-up's one-by-one side), measured in this process, run at the threads the packs will have: they ran at
    torch's default (every core here) while each pack's task trained on --cpus-per-pack threads."""
    for c in configs:
        c.train.threads = cpus if c.train.threads is None else c.train.threads


def run_ray(jobs: list[PackJob], rec: Recorder, opts: Options, ray: Any) -> None:
    """Run the packs as Ray tasks; `ray`: the module `check_ray` returned before anything was measured. The packs'
    configs hold their task's threads already (`task_threads`, set by `run` before planning)."""
    from stride.launch.ray_train import init_ray, shutdown_ray

    try:
        started = init_ray(ray, opts.ray_address)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise SweepError(f"cannot connect to a Ray cluster at {opts.ray_address}: {str(exc).splitlines()[0]}") from None
    if opts.retake is not None:
        opts.retake()  # ray.init's SIGTERM handler exits at once: SIGTERM stops the sweep as Ctrl-C does
    pending: dict[Any, tuple[PackJob, float]] = {}
    try:
        task = ray.remote(num_cpus=opts.cpus_per_pack)(ray_job)
        pending = {task.remote(job): (job, time.perf_counter()) for job in jobs}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=RAY_POLL_S)
            if opts.stop is not None:
                opts.stop()
            if not ready:
                continue
            job, t0 = pending.pop(ready[0])
            try:
                out = ray.get(ready[0])
            except Exception as exc:  # the task itself failed (its worker died): RayTaskError, WorkerCrashedError
                msg = str(exc).strip().splitlines()[-1][:300]
                rec.failure(job, [], {"error": msg, "traceback": str(exc)})
                rec.pack(job, [], time.perf_counter() - t0, "ray", msg)
                continue
            if out.get("config_error") is not None:  # as the local backend: a refusal of what the user gave stops
                raise ConfigError(out["config_error"])
            for item in out["items"]:
                rec.point(item)
            failure = out.get("failure")
            if failure is not None:  # the pack raised: its finished points are written above, the rest failed
                rec.failure(job, out["items"], failure)
            # the task's own time (not its wait in the queue) and its own run-queue wait
            rec.pack(job, out["items"], out["wall_s"], "ray", failure["error"] if failure else None,
                     waiting=out.get("waiting_threads"), other=out.get("other_processes_cores"))
    finally:
        for ref in pending:  # stopped: the packs still queued or running are cancelled (a cluster we did not start)
            with contextlib.suppress(Exception):  # a task that ended meanwhile: nothing to cancel
                ray.cancel(ref, force=True)
        if started:
            shutdown_ray(ray)


def run(points: list[Point], store: SweepStore, opts: Options) -> dict[str, Any]:
    """Train every unfinished point; returns what the report needs about this invocation."""
    if opts.backend not in ("local", "ray"):
        raise ConfigError(f"--backend {opts.backend!r}: one of local, ray")
    todo = [p for p in points if not store.done(p.id)]
    if len(todo) < len(points):
        opts.log(f"resuming: {len(points) - len(todo)} of {len(points)} points already finished in {store.root}")
    start_index = _next_pack_index(store)  # packs.jsonl is checked here, before anything is measured or trained
    ray = check_ray(opts) if todo and opts.backend == "ray" else None
    if ray is not None:
        task_threads([p.config for p in todo], opts.cpus_per_pack)
    t0 = time.perf_counter()
    with ContentionOnce(opts.log) as contention:  # the Trainers of this process: the probe's and the lone points'
        jobs, plans = plan_jobs(todo, store, opts, start_index=start_index) if todo else ([], {})
        rates = one_by_one_rates(todo, plans, opts.log, opts.stop) if todo else {}
        rec = Recorder(store, points, rates, opts.log)
        runnable = []
        for job in jobs:  # a class whose model raised while sized, probed or timed: its points failed, others go on
            failure = plans[pack_key(job.configs[0])].failure
            if failure is None:
                runnable.append(job)
            else:
                rec.failure(job, [], failure)
        jobs = runnable
        if jobs:
            (run_ray(jobs, rec, opts, ray) if opts.backend == "ray" else run_local(jobs, rec, opts.stop))
    contention.tally()
    store.prune_tracebacks()  # an earlier attempt's pack tracebacks whose points all finished since
    if rec.failed:  # every other pack ran; the report is written by the caller, then this line, exit status 1
        raise SweepError(rec.failed_text(len(points)))
    return {"wall_s": time.perf_counter() - t0, "trained": rec.written,
            "classes": [{"size": v.size, "why": v.why} for v in plans.values()]}


class ContentionOnce(logging.Filter):
    """Says the Trainer's contention warning once a sweep, in the sweep's words, and the figures of all at the end.

    Every Trainer warns at the end of its run where its threads waited for cores (stride.train.trainer, through
    stride.metrics.contention.warn_contended); a sweep runs many in this process (the probe's, the one-by-one
    rate's, each point trained alone), and a contended host printed the same line for each: 7 for a 6-point sweep.
    Within `with`, the first goes to `log` with the remedy as a `--set` (it applies to every point), the later ones
    are only counted; `tally()` says how many runs it held for and their range, where more than one."""

    def __init__(self, log: Callable[[str], None]) -> None:
        super().__init__()
        self.log = log
        self.waiting: list[float | None] = []  # threads waiting for a core, each contended run's (None: not read)
        self._logger = logging.getLogger("stride")  # the Trainer's (stride.train.trainer.log)

    def __enter__(self) -> ContentionOnce:
        self._logger.addFilter(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self._logger.removeFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        found = getattr(record, CONTENTION_RECORD, None)  # the Trainer's warning (metrics.contention.warn_contended)
        if found is None:
            return True  # any other record passes as it was
        note, waiting = found
        self.waiting.append(waiting)
        if len(self.waiting) == 1:
            self.log(f"warning: {_as_sweep_advice(note)}; said once for all of this sweep's runs")
        return False

    def tally(self) -> None:
        """One line for the runs after the first that waited for cores (nothing where there were none)."""
        if len(self.waiting) < 2:
            return
        figures = sorted(w for w in self.waiting if w is not None)
        spread = "" if not figures else (f" ({figures[0]:.2f} threads waiting for a core on average)"
                                         if figures[0] == figures[-1] else
                                         f" ({figures[0]:.2f}-{figures[-1]:.2f} threads waiting for a core on average)")
        self.log(f"the contention warning held for {len(self.waiting)} of this sweep's runs{spread}: its timings "
                 "and speed-up are of a busy host")


def _as_sweep_advice(note: str) -> str:
    """The note's remedy as the option of `stride sweep` that applies it to every point (`--set train.threads=N`)."""
    note = re.sub(r"\(e\.g\. train\.threads=(\d+)\)", r"(e.g. --set train.threads=\1)", note)
    return re.sub(r"set train\.threads <= (\d+)", r"--set train.threads=\1 (or fewer)", note)


def _next_pack_index(store: SweepStore) -> int:
    """One past the highest pack index logged (a line cut by a kill or Ctrl-C is skipped, as the report skips it)."""
    return 1 + max((rec["index"] for rec in load_pack_log(store.root)), default=-1)


def pack_record_problem(rec: Any) -> str | None:
    """What makes `rec` (a parsed packs.jsonl line) not a pack's record as Recorder.pack writes it; None if it is.
    Checked: what the report reads (index, ids, size, wall_s, train_s, time, error, one_by_one_rate)."""
    if not isinstance(rec, dict):
        return f"holds a JSON {type(rec).__name__}, not a pack's record"
    if type(rec.get("index")) is not int or rec["index"] < 0:
        return f"index is {json.dumps(rec.get('index'))[:40]}, not a whole number >= 0"
    if not (isinstance(rec.get("ids"), list) and all(isinstance(i, str) for i in rec["ids"])):
        return "ids is not a list of point ids"
    if type(rec.get("size")) is not int or rec["size"] < 0:
        return f"size is {json.dumps(rec.get('size'))[:40]}, not a whole number >= 0"
    for key in ("wall_s", "time"):
        if not (finite_number(rec.get(key)) and rec[key] >= 0):
            return f"{key} is {json.dumps(rec.get(key))[:40]}, not a finite number >= 0"
    if rec.get("train_s") is not None and not (finite_number(rec["train_s"]) and rec["train_s"] >= 0):
        return f"train_s is {json.dumps(rec['train_s'])[:40]}, not a finite number >= 0"
    if rec.get("error") is not None and not isinstance(rec["error"], str):
        return f"error is {json.dumps(rec['error'])[:40]}, not text"
    for key in ("waiting_threads", "other_processes_cores"):
        if rec.get(key) is not None and not (finite_number(rec[key]) and rec[key] >= 0):
            return f"{key} is {json.dumps(rec[key])[:40]}, not a finite number >= 0"
    rate = rec.get("one_by_one_rate")
    if rate is not None and not (isinstance(rate, dict) and (rate.get("method") is None
                                                             or isinstance(rate["method"], str))):
        return "one_by_one_rate is not a table with a text method"
    return None


def load_pack_log(root: Path) -> list[dict[str, Any]]:
    """The packs' records. A line that is not JSON is skipped (a line cut by a kill; the packs it would describe
    are re-run anyway); one that parses but is not a pack's record was edited or damaged, and is refused in one
    line naming the file and line (SweepFileError), as point files are: it was a traceback (KeyError,
    AttributeError, TypeError) from the report."""
    path = Path(root) / "packs.jsonl"
    try:  # a FIFO or a link to /dev/zero is refused, never read (one filled the memory: audit 14 M3)
        text = read_input_bytes(path, limit=PACK_LOG_MAX_BYTES, what="pack log").decode(errors="replace")
    except InputFileMissing:
        return []
    except InputFileError as exc:
        raise SweepFileError(f"{exc}; delete it (the file holds only the cost figures: deleting it loses them, not a "
                             "point) and run the same command again") from None
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if why := pack_record_problem(rec):
            raise SweepFileError(f"{path} line {n}: {why} (stride writes each pack's record whole: the file was "
                                 "edited or damaged); delete that line (the file holds only the cost figures: "
                                 "deleting it loses them, not a point) and run the same command again")
        out.append(rec)
    return out
