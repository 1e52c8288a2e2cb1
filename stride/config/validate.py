"""Checks on values and on relations between fields, run after every key has its type."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stride.config.errors import ConfigError, suggest

if TYPE_CHECKING:
    from stride.config.schema import RunConfig

CHOICES: dict[str, tuple[str, ...]] = {
    "model.loss": ("mse", "huber", "quantile"),
    "optim.schedule": ("cosine", "constant"),
    "optim.impl": ("auto", "foreach", "fused", "for-loop"),
    "train.precision": ("fp32", "bf16", "fp16"),
    "train.activation_checkpointing": ("none", "full", "every_k"),
    "train.compile": ("off", "model", "model+optimizer"),
    "train.kernels": ("torch", "triton", "compile"),
}


def _check_choice(key: str, value: str) -> None:
    options = CHOICES[key]
    if value not in options:
        raise ConfigError(f"`{key}` = {value!r} is not one of {', '.join(options)}{suggest(value, list(options))}")


def _positive(key: str, value: float | int, strict: bool = True) -> None:
    if (strict and value <= 0) or (not strict and value < 0):
        want = "> 0" if strict else ">= 0"
        raise ConfigError(f"`{key}` = {value!r} must be {want}")


def validate(cfg: RunConfig) -> None:
    for key in CHOICES:
        sec, name = key.split(".")
        _check_choice(key, getattr(getattr(cfg, sec), name))

    m, d, o, t, p = cfg.model, cfg.data, cfg.optim, cfg.train, cfg.parallel
    for key, val in [("optim.lr", o.lr), ("optim.eps", o.eps), ("train.steps", t.steps),
                     ("train.batch_size", t.batch_size), ("train.grad_accum", t.grad_accum),
                     ("data.seq_len", d.seq_len), ("data.n_assets", d.n_assets), ("data.n_steps", d.n_steps),
                     ("model.patch_len", m.patch_len), ("train.val_batches", t.val_batches),
                     ("metrics.log_every", cfg.metrics.log_every), ("train.ac_every", t.ac_every)]:
        _positive(key, val)
    for key, val in [("optim.weight_decay", o.weight_decay), ("optim.warmup_steps", o.warmup_steps),
                     ("train.val_every", t.val_every), ("model.dropout", m.dropout),
                     ("checkpoint.every", cfg.checkpoint.every),
                     ("metrics.skip_steps", cfg.metrics.skip_steps)]:
        _positive(key, val, strict=False)
    if t.grad_clip is not None:
        _positive("train.grad_clip", t.grad_clip)
    if t.threads is not None:
        _positive("train.threads", t.threads)
    if t.batch_size % t.grad_accum:
        raise ConfigError(
            f"`train.batch_size` = {t.batch_size} is not divisible by `train.grad_accum` = {t.grad_accum}: "
            "each micro-batch must have the same size "
            f"(try batch_size = {t.batch_size // t.grad_accum * t.grad_accum or t.grad_accum})"
        )
    if len(o.betas) != 2 or not all(0 <= b < 1 for b in o.betas):
        raise ConfigError(f"`optim.betas` = {o.betas!r} must be two numbers in [0, 1)")
    if not 0 < o.min_lr_ratio <= 1:
        raise ConfigError(f"`optim.min_lr_ratio` = {o.min_lr_ratio!r} must be in (0, 1]")
    if not 0 <= m.dropout < 1:
        raise ConfigError(f"`model.dropout` = {m.dropout!r} must be in [0, 1)")
    if not 0 < d.val_fraction < 1:
        raise ConfigError(f"`data.val_fraction` = {d.val_fraction!r} must be in (0, 1)")
    if not d.horizons or any(h <= 0 for h in d.horizons):
        raise ConfigError(f"`data.horizons` = {d.horizons!r} must be a non-empty list of positive integers")
    if m.loss == "quantile" and (not m.quantiles or any(not 0 < q < 1 for q in m.quantiles)):
        raise ConfigError(f"`model.quantiles` = {m.quantiles!r} must be numbers in (0, 1)")
    if d.seq_len % m.patch_len:
        raise ConfigError(f"`data.seq_len` = {d.seq_len} is not divisible by `model.patch_len` = {m.patch_len}")
    if t.device not in ("auto", "cpu", "cuda") and not t.device.startswith("cuda:"):
        raise ConfigError(f"`train.device` = {t.device!r} must be auto, cpu, cuda or cuda:N")
    for key in ("dp_replicate", "dp_shard", "tp", "pp"):
        _positive(f"parallel.{key}", getattr(p, key))
    if t.target_val_loss is not None and t.val_every == 0:
        raise ConfigError("`train.target_val_loss` needs validation: set `train.val_every` > 0")
