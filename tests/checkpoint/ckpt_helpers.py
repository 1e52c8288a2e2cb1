"""Small deterministic configs, a reference run, and a CLI launcher for the checkpoint tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from stride.config import RunConfig, config_to_toml, load_config
from stride.train.callbacks import Callback
from stride.train.trainer import Trainer

REPO = Path(__file__).resolve().parents[2]
BASE = [
    "data.n_assets=4", "data.n_steps=1024", "data.seq_len=16", "data.horizons=[1, 5]",
    "train.batch_size=32", "train.steps=24", "train.val_every=0", "train.threads=1", "train.deterministic=true",
    "metrics.progress=false", "metrics.flops=false", "metrics.skip_steps=0", "metrics.log_every=1",
    "optim.warmup_steps=2", "checkpoint.enabled=true", "checkpoint.every=3", "checkpoint.keep_last=2",
]


def ckpt_config(*overrides: str) -> RunConfig:
    return load_config(overrides=[*BASE, *overrides])


def reference_sha(*overrides: str) -> str:
    """params_sha256 of an uninterrupted run with checkpointing off (checkpoints must not change training)."""
    cfg = ckpt_config(*overrides, "checkpoint.enabled=false")
    try:
        return Trainer(config=cfg, write_run_dir=False).fit().summary["params_sha256"]
    finally:
        torch.use_deterministic_algorithms(False)


class Crash(RuntimeError):
    pass


class CrashAt(Callback):
    """Ends the run with an exception at the end of step `at` (an in-process stand-in for a dying process)."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_step_end(self, trainer: Trainer) -> None:
        if trainer.step == self.at:
            raise Crash(f"crash at step {self.at}")


def fit(out: Path, *overrides: str, callbacks: list[Callback] | None = None, **kw) -> dict:
    try:
        return Trainer(config=ckpt_config(*overrides), out=out, callbacks=callbacks, **kw).fit().summary
    finally:
        torch.use_deterministic_algorithms(False)


def write_config(path: Path, *overrides: str) -> Path:
    path.write_text(config_to_toml(ckpt_config(*overrides)))
    return path


def cli(config: Path, out: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """`stride train CONFIG --out DIR` in a fresh process (auto-resume is what is under test)."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "stride", "train", str(config), "--out", str(out), "--no-progress"],
                          capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env)


def popen_cli(config: Path, out: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.Popen([sys.executable, "-m", "stride", "train", str(config), "--out", str(out), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)


def summary_sha(out: Path) -> str:
    import json

    return json.loads((out / "summary.json").read_text())["params_sha256"]


def dead_pid() -> int:
    """The id of a process that has ended (for a leftover 'written by a process that is gone')."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def mounted_tmpfs(mnt: Path, size: str):
    """A size-limited tmpfs at `mnt` for the body of a fixture (a real full disk); skips where `mount` is refused."""
    import pytest

    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a size-limited tmpfs here (needs root/CAP_SYS_ADMIN): {r.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def stderr_of_all(procs: list[subprocess.Popen], timeout: float = 150) -> list[str]:
    """Each rank's stderr once every rank has ended (a hard limit: any still running then is killed)."""
    errs = []
    try:
        for p in procs:
            errs.append(p.communicate(timeout=timeout)[1])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    return errs


def inf_loss_at(bad: tuple[int, ...]):  # noqa: ANN201 (a loss function)
    """An MSE loss that is infinite on the training calls numbered in `bad` (1-based; validation calls it too and
    is not counted): the steps a rollback or a guard must catch."""
    calls = {"n": 0}

    def loss_fn(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = torch.nn.functional.mse_loss(pred, y)
        if torch.is_grad_enabled():  # training steps only: validation calls it too
            calls["n"] += 1
            return loss * float("inf") if calls["n"] in bad else loss
        return loss

    return loss_fn
