"""Small configs so foundation tests run in seconds on 2 cores."""

from __future__ import annotations

from stride.config import RunConfig, load_config


def small_config(**overrides: object) -> RunConfig:
    base = [
        "data.n_assets=4", "data.n_steps=1024", "data.seq_len=16", "data.horizons=[1, 5]",
        "train.batch_size=32", "train.steps=6", "train.val_every=0", "train.threads=1",
        "metrics.progress=false", "metrics.flops=false", "metrics.skip_steps=0",
        "optim.warmup_steps=2",
    ]
    extra = [f"{k.replace('__', '.')}={_lit(v)}" for k, v in overrides.items()]
    return load_config(overrides=base + extra)


def _lit(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    return repr(v)
