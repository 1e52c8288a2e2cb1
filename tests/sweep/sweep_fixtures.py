"""Small configs and solo reference runs for the sweep tests (seconds on 2 cores)."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import torch
import torch.nn.functional as F

from stride.cli.main import main
from stride.config import RunConfig, load_config
from stride.models.registry import build_model
from stride.train.device import seed_everything
from stride.train.trainer import Trainer

FP32_TOL = 2e-5  # packed vs solo float32 parameters: measured up to 1.7e-6 (MLP, 8 steps), batched-GEMM rounding

# the packed workloads: an MLP, the residual LSTM, the time-series transformer (all at size tiny)
WORKLOADS = ("mlp", "lstm", "ts_transformer")

BASE = [
    "data.n_assets=4", "data.n_steps=1024", "data.seq_len=16", "data.horizons=[1, 5]",
    "train.batch_size=32", "train.steps=8", "train.val_every=4", "train.val_batches=2", "train.threads=1",
    "metrics.progress=false", "metrics.flops=false", "metrics.skip_steps=0", "optim.warmup_steps=2",
    "model.size=tiny",
]


def mlp_toml(steps: int, val_every: int, *extra: str) -> str:
    """A small MLP sweep config as a TOML file's text (4 assets, window of 8, batch 32, 1 thread)."""
    return "\n".join([
        "[model]", 'name = "mlp"', 'size = "tiny"',
        "[data]", "n_assets = 4", "n_steps = 1024", "seq_len = 8", "horizons = [1, 5]",
        "[train]", f"steps = {steps}", "batch_size = 32", f"val_every = {val_every}", "val_batches = 2", "threads = 1",
        "[metrics]", "progress = false", "flops = false", *extra, ""])


def config(workload: str, *overrides: str) -> RunConfig:
    return load_config(overrides=[*BASE, f"model.name={workload}", *overrides])


def solo(cfg: RunConfig) -> Trainer:
    """The model's own `stride train` run (no run directory), after fit()."""
    trainer = Trainer(config=copy.deepcopy(cfg), write_run_dir=False)
    trainer.fit()
    return trainer


def tensor_data(cfg: RunConfig, n: int, seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(X, Y) with a learnable linear signal, shaped like the config's windows."""
    g = torch.Generator().manual_seed(seed)
    f, t, h = 6, cfg.data.seq_len, len(cfg.data.horizons)
    x = torch.randn(n, t, f, generator=g, dtype=torch.float64)
    w = torch.randn(t * f, h, generator=g, dtype=torch.float64) / (t * f) ** 0.5
    y = x.flatten(1) @ w + 0.5 * torch.randn(n, h, generator=g, dtype=torch.float64)
    return x.to(dtype), y.to(dtype)


def reference_loss(cfg: RunConfig):
    """The config's loss without make_loss's float32 cast, so a float64 reference stays float64."""
    m = cfg.model
    if m.loss == "mse":
        return lambda p, y: F.mse_loss(p, y)
    if m.loss == "huber":
        return lambda p, y: F.huber_loss(p, y, delta=m.huber_delta)
    q = torch.tensor(m.quantiles, dtype=torch.float64)

    def pinball(p, y):
        err = y.unsqueeze(-1) - p
        return torch.maximum(q * err, (q - 1) * err).mean()

    return pinball


def solo_on_tensors(cfg: RunConfig, train, val, dtype: torch.dtype) -> Trainer:
    """The solo Trainer on explicit tensors, with the model in `dtype` (float64: the reference)."""
    seed_everything(cfg.train.seed)
    model = build_model(cfg.model, train[0].shape[-1], train[0].shape[1], train[1].shape[-1]).to(dtype)
    trainer = Trainer(model=model, train_data=train, val_data=val, config=copy.deepcopy(cfg),
                      loss_fn=reference_loss(cfg), write_run_dir=False)
    trainer.fit()
    return trainer


def max_param_diff(solo_state: dict[str, torch.Tensor], packed_state: dict[str, torch.Tensor]) -> float:
    assert solo_state.keys() == packed_state.keys()
    return max((solo_state[k].double() - packed_state[k].double()).abs().max().item() for k in solo_state)


def drawing_source(cfg, batch_size):
    """A `module:factory` data source that draws from torch's global generator while it builds."""
    import dataclasses

    from stride.data.build import build_synthetic

    torch.rand(1)
    return build_synthetic(dataclasses.replace(cfg, source="synthetic"), batch_size)


# a 2 x 2 grid in one pack of 2 per configuration: the finished sweep the point-file tests edit copies of
GRID = ["--grid", "optim.lr=1e-3,2e-3", "--grid", "train.seed=0..1", "--pack", "2"]


def sweep_argv(config: Path, out: Path) -> list[str]:
    return ["sweep", str(config), *GRID, "--out", str(out)]


def finished_sweep(config: Path, tmp_path_factory) -> Path:  # noqa: ANN001 (pytest's TempPathFactory)
    """The GRID sweep of `config`, finished, in a new folder (a module-scoped fixture's body)."""
    out = tmp_path_factory.mktemp("sw") / "s"
    assert main(sweep_argv(config, out)) == 0
    return out


def copy_of(finished: Path, tmp_path: Path) -> Path:
    """A copy of a finished sweep that a test may edit."""
    return Path(shutil.copytree(finished, tmp_path / "s"))
