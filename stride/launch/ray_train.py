"""`stride launch ray`: stride's Trainer inside Ray Train's `TorchTrainer`, one Trainer per Ray worker.

Ray Train places N worker actors (on one machine or a Ray cluster), sets RANK / WORLD_SIZE /
LOCAL_RANK and initialises the default process group (gloo on CPU, nccl on GPU); each worker then
builds an ordinary `stride.Trainer`, whose mesh is made on that process group (stride.parallel.mesh
uses an initialised group as it is). So Ray plays torchrun's part: placement, rendezvous, restarts.
What stays stride's: the run directory (rank 0 writes it), checkpoints and auto-resume (under the
run directory, which every worker must reach: one machine or a shared filesystem). A restart after
a failure (`FailureConfig(max_failures)`) re-runs every worker's Trainer, which resumes from the
newest valid stride checkpoint; Ray's own checkpoint mechanism is not used.

Ray is an optional extra (`pip install -e '.[ray]'` in the stride clone); nothing here imports it at module import.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stride.config.errors import ConfigError
from stride.config.schema import RunConfig
from stride.launch.script_values import check_value

INSTALL_HINT = "pip install -e '.[ray]' (in the stride clone)  (or: pip install 'ray[train]>=2.40,<3')"

# Set on every launch unless the user's --set says otherwise: a restarted worker group must find
# a checkpoint to resume from, and a progress bar has no terminal inside a Ray worker.
LAUNCH_DEFAULTS = ("checkpoint.enabled=true", "checkpoint.resume=auto", "metrics.progress=false")


class RayRunFailed(RuntimeError):
    """The Ray run ended in error (after its restarts); stride's checkpoints let the same command resume."""


class RayNotInstalled(RuntimeError):
    """`stride launch ray` without the extra: say how to install it."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"Ray Train is not installed ({cause}); install it with: {INSTALL_HINT}")


def import_ray() -> Any:
    """`ray` with `ray.train.torch` importable, or RayNotInstalled naming the install command."""
    try:
        import ray
        import ray.train.torch  # noqa: F401 (the [train] extra: pandas, pyarrow, ...)
    except ImportError as exc:
        raise RayNotInstalled(exc) from exc
    return ray


@dataclass
class RayLaunch:
    """Where and how to run; `out` is the run directory every worker uses (made absolute here)."""

    workers: int
    use_gpu: str = "auto"  # auto: GPUs when the Ray cluster has one per worker | true | false
    address: str | None = None  # an existing cluster ("auto", "ray://host:10001", host:port); None: start one
    cpus_per_worker: int = 1
    max_failures: int = 0  # worker-group restarts after a failure (Ray's FailureConfig)
    out: Path | None = None
    callbacks: list[Any] = field(default_factory=list)  # extra stride Callbacks, pickled to every worker

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ConfigError(f"--workers {self.workers}: need at least 1")
        if self.cpus_per_worker < 1:
            raise ConfigError(f"--cpus-per-worker {self.cpus_per_worker}: need at least 1")
        if self.max_failures < -1:
            raise ConfigError(f"--max-failures {self.max_failures}: need >= 0 (or -1 for unlimited)")
        if self.use_gpu not in ("auto", "true", "false"):
            raise ConfigError(f"--use-gpu {self.use_gpu!r}: one of auto, true, false")
        if self.address is not None:
            check_value(self.address, "--address")
        if self.out is not None:
            check_value(self.out, "--out")


def run_directory(cfg: RunConfig, out: Path | str | None) -> Path:
    """The absolute run directory, made once on the driver (so every worker and attempt shares it)."""
    from stride.metrics.run_dir import RunDir

    return RunDir.create(cfg.metrics.out_dir, cfg.train.name, Path(out).expanduser() if out else None).path.resolve()


def resolve_use_gpu(choice: str, cluster_gpus: float, workers: int, device: str) -> bool:
    """auto: one GPU per worker when the cluster has them and the config does not ask for the CPU."""
    if choice == "true":
        if device == "cpu":
            raise ConfigError("--use-gpu true but `train.device` = 'cpu'")
        return True
    if choice == "false":
        if device.startswith("cuda"):
            raise ConfigError(f"--use-gpu false but `train.device` = {device!r}")
        return False
    if device.startswith("cuda") and cluster_gpus < workers:
        raise ConfigError(f"`train.device` = {device!r} but the Ray cluster has {cluster_gpus:g} GPUs "
                          f"for {workers} workers")
    return device != "cpu" and cluster_gpus >= workers


def train_loop_per_worker(loop: dict[str, Any]) -> dict[str, Any] | None:
    """One Ray worker: a stride Trainer on the process group Ray Train initialised.

    Rank 0 returns the run's summary (Ray's `Result.return_value`); other ranks return None.
    """
    import ray.train.torch

    from stride.train.trainer import Trainer

    cfg: RunConfig = loop["config"]
    if loop["use_gpu"]:
        # stride (like torch's DeviceMesh) takes cuda:LOCAL_RANK, but the GPU Ray gave this worker can have
        # another index (CUDA_VISIBLE_DEVICES=2,3 and GPU 2 is cuda:0 for either local rank). Point
        # LOCAL_RANK at it rather than writing the index into the config, which must be equal on every rank.
        device = ray.train.torch.get_device()
        if device.type == "cuda" and device.index is not None:
            os.environ["LOCAL_RANK"] = str(device.index)
    # Ray starts workers in their own working directory; relative paths in the config (data
    # files) mean the driver's directory, where it exists on this node.
    if os.path.isdir(loop["cwd"]):
        os.chdir(loop["cwd"])
    trainer = Trainer(config=cfg, out=loop["out"], callbacks=list(loop["callbacks"]))
    result = trainer.fit()
    return result.summary if trainer.par.is_rank0 else None


@dataclass
class RayOutcome:
    summary: dict[str, Any]
    run_dir: Path
    summary_source: str  # "ray" (Result.return_value) or "run_dir" (summary.json; Ray without return_value)
    fit_s: float


AUTH_ENV = ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE")
_OWN_TOKEN: list[str | None] = [None]  # the token _init_ray put in the environment, removed at shutdown
# One token for this process: Ray reads the token once per process, so a second cluster started here under a
# new token could not reach its own GCS (InvalidAuthToken): a notebook running two launches would fail.
_PROCESS_TOKEN = secrets.token_hex(32)


def _drop_own_token() -> None:
    if _OWN_TOKEN[0] is not None and os.environ.get("RAY_AUTH_TOKEN") == _OWN_TOKEN[0]:
        del os.environ["RAY_AUTH_TOKEN"]
    _OWN_TOKEN[0] = None


def _init_ray(ray: Any, spec: RayLaunch) -> bool:
    """Connect to (or start) a Ray cluster unless this process already has; True if we connected here."""
    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage report leaves the machine
    if spec.address is None:
        # A cluster started for one launch needs no lasting secret: Ray (2.5x) would otherwise enable
        # token auth and write ~/.ray/auth_token. A token in the environment keeps auth on, writes nothing.
        if not any(k in os.environ for k in AUTH_ENV) and not (Path.home() / ".ray" / "auth_token").exists():
            os.environ["RAY_AUTH_TOKEN"] = _OWN_TOKEN[0] = _PROCESS_TOKEN
        try:
            ray.init(num_cpus=max(os.cpu_count() or 1, spec.workers * spec.cpus_per_worker),
                     include_dashboard=False, log_to_driver=True)
        except BaseException:
            _drop_own_token()
            raise
    else:
        ray.init(address=spec.address, log_to_driver=True)
    return True


def init_ray(ray: Any, address: str | None) -> bool:
    """Connect to `address` (None: start a cluster on this machine) as `stride launch ray` does, for other Ray
    work (`stride sweep --backend ray`); True if this call connected, so the caller shuts it down."""
    return _init_ray(ray, RayLaunch(workers=1, address=address))


def shutdown_ray(ray: Any) -> None:
    ray.shutdown()
    _drop_own_token()


def _failure_text(exc: BaseException, spec: RayLaunch, out: Path) -> str:
    return (f"the Ray run failed ({spec.max_failures} restart(s) allowed by --max-failures): "
            f"{type(exc).__name__}: {exc}\nrun the same command with --out {out} to resume from its newest checkpoint")


def launch_ray(cfg: RunConfig, spec: RayLaunch,
               on_start: Callable[[Path, bool], None] | None = None) -> RayOutcome:
    """Run `cfg` on `spec.workers` Ray workers; blocks until done. A failed run raises RayRunFailed."""
    ray = import_ray()
    from ray.train import FailureConfig, ScalingConfig
    from ray.train import RunConfig as RayRunConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from stride.parallel.layout import check_batch, resolve_layout
    from stride.parallel.mesh import choose_backend

    check_batch(resolve_layout(cfg.parallel, spec.workers), cfg.train.batch_size, cfg.train.grad_accum)
    out = run_directory(cfg, spec.out)
    started = _init_ray(ray, spec)
    try:
        use_gpu = resolve_use_gpu(spec.use_gpu, float(ray.cluster_resources().get("GPU", 0)), spec.workers,
                                  cfg.train.device)
        import torch

        backend = choose_backend(cfg.parallel.backend, torch.device("cuda" if use_gpu else "cpu"))
        t = cfg.train
        # As torchrun's launcher: one thread set per worker's CPUs. A CPU launch pins the device, so a
        # worker that happens to see a GPU Ray did not give it stays off it.
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(
            t, threads=spec.cpus_per_worker if t.threads is None else t.threads,
            device="cpu" if not use_gpu and t.device == "auto" else t.device))
        if on_start is not None:
            on_start(out, use_gpu)
        trainer = TorchTrainer(
            train_loop_per_worker,
            train_loop_config={"config": cfg, "out": str(out), "use_gpu": use_gpu, "cwd": os.getcwd(),
                               "callbacks": spec.callbacks},
            torch_config=TorchConfig(backend=backend),
            scaling_config=ScalingConfig(num_workers=spec.workers, use_gpu=use_gpu,
                                         resources_per_worker={"CPU": spec.cpus_per_worker}),
            run_config=RayRunConfig(name=f"{out.name}-{time.strftime('%Y%m%d-%H%M%S')}",
                                    storage_path=str(out / "ray"),
                                    failure_config=FailureConfig(max_failures=spec.max_failures)),
        )
        t0 = time.perf_counter()
        try:
            result = trainer.fit()
        except Exception as exc:  # Ray's TrainingFailedError (its module differs between Train v1 and v2)
            raise RayRunFailed(_failure_text(exc, spec, out)) from exc
        fit_s = time.perf_counter() - t0
    finally:
        if started:
            ray.shutdown()
            _drop_own_token()
    if getattr(result, "error", None) is not None:
        raise RayRunFailed(_failure_text(result.error, spec, out))
    summary = getattr(result, "return_value", None)
    source = "ray"
    if summary is None:  # Ray before Result.return_value: read what rank 0 wrote
        path = out / "summary.json"
        if not path.exists():
            raise RuntimeError(f"the Ray run ended without a summary ({path} not found)")
        summary, source = json.loads(path.read_text()), "run_dir"
    return RayOutcome(summary, out, source, fit_s)
