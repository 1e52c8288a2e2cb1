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
    _validate_checkpoint(cfg)
    _validate_parallel(cfg)
    _validate_data(cfg)
    _validate_observe(cfg)


# -- [checkpoint] (stride.checkpoint) -------------------------------------------------------------
CHECKPOINT_CHOICES: dict[str, tuple[str, ...]] = {
    "checkpoint.resume": ("auto", "never"),
    "checkpoint.verify": ("checksum", "size"),
    "checkpoint.spike_action": ("log", "skip", "rollback"),
    "checkpoint.staging": ("auto", "loop", "background"),
}


def _validate_checkpoint(cfg: RunConfig) -> None:
    c = cfg.checkpoint
    for key, options in CHECKPOINT_CHOICES.items():
        value = getattr(c, key.split(".")[1])
        if value not in options:
            raise ConfigError(f"`{key}` = {value!r} is not one of {', '.join(options)}{suggest(value, list(options))}")
    _positive("checkpoint.keep_last", c.keep_last)
    _positive("checkpoint.spike_window", c.spike_window)
    for key in ("keep_every", "nan_rollback_after", "max_rollbacks"):
        _positive(f"checkpoint.{key}", getattr(c, key), strict=False)
    if c.spike_threshold is not None and c.spike_threshold <= 1:
        raise ConfigError(
            f"`checkpoint.spike_threshold` = {c.spike_threshold!r} must be > 1 (a multiple of the median)"
        )
    if not c.dir.strip():
        raise ConfigError("`checkpoint.dir` is empty: name a folder (relative to the run directory or absolute)")
    if c.spike_action == "rollback" and c.spike_threshold is not None and not c.enabled:
        raise ConfigError("`checkpoint.spike_action` = 'rollback' needs checkpoints: set `checkpoint.enabled` = true")


# -- [parallel] (stride.parallel; relations to the world size and the model are checked there) ----
PARALLEL_CHOICES: dict[str, tuple[str, ...]] = {
    "parallel.backend": ("auto", "gloo", "nccl"),
    "parallel.mp_param_dtype": ("none", "bf16", "fp16"),
    "parallel.comm_hook": ("none", "fp16", "bf16", "powersgd"),
    "parallel.pp_schedule": ("gpipe", "1f1b", "interleaved_1f1b", "zero_bubble", "zbv"),
}


def _validate_parallel(cfg: RunConfig) -> None:
    p = cfg.parallel
    for key, options in PARALLEL_CHOICES.items():
        value = getattr(p, key.split(".")[1])
        if value not in options:
            raise ConfigError(f"`{key}` = {value!r} is not one of {', '.join(options)}{suggest(value, list(options))}")
    _positive("parallel.ddp_bucket_mb", p.ddp_bucket_mb)
    _positive("parallel.powersgd_rank", p.powersgd_rank)
    _positive("parallel.collective_timeout_s", p.collective_timeout_s)
    if p.comm_hook != "none" and p.dp_shard > 1:
        raise ConfigError(
            f"`parallel.comm_hook` = {p.comm_hook!r} is a DDP hook but `parallel.dp_shard` = {p.dp_shard} "
            "selects FSDP2: use `parallel.mp_param_dtype` to communicate in low precision there"
        )
    _positive("parallel.microbatches", p.microbatches, strict=False)
    _positive("parallel.pp_stages_per_rank", p.pp_stages_per_rank, strict=False)
    if p.pp > 1 and cfg.train.precision == "fp16":
        raise ConfigError(
            f"`train.precision` = 'fp16' with `parallel.pp` = {p.pp}: the pipeline schedule runs backward itself, "
            "outside the fp16 loss scaler; use 'bf16' (no loss scaling needed) or 'fp32'"
        )



# -- [data] store and loader fields (stride.data) -------------------------------------------------
DATA_NORMALIZE = ("none", "train", "expanding", "rolling")
DATA_BATCH_DTYPES = ("float32", "bfloat16")


def _validate_data(cfg: RunConfig) -> None:
    d = cfg.data
    if d.source == "store" and not d.store:
        raise ConfigError('`data.source` = "store" needs `data.store` = the directory from `stride data ingest`')
    if d.normalize not in DATA_NORMALIZE:
        raise ConfigError(f"`data.normalize` = {d.normalize!r} is not one of {', '.join(DATA_NORMALIZE)}"
                          f"{suggest(d.normalize, list(DATA_NORMALIZE))}")
    if d.normalize == "rolling" and d.normalize_window < 2:
        raise ConfigError(f"`data.normalize_window` = {d.normalize_window} must be >= 2 rows with "
                          '`data.normalize` = "rolling" (the rows each rolling mean/std is taken over)')
    if d.normalize != "rolling" and d.normalize_window != 0:
        raise ConfigError(f"`data.normalize_window` = {d.normalize_window} is only used with "
                          f'`data.normalize` = "rolling" (it is {d.normalize!r}); remove it or set normalize')
    if d.embargo < -1:
        raise ConfigError(f"`data.embargo` = {d.embargo} must be >= 0 rows, or -1 for the largest horizon")
    if not 0 <= d.test_fraction < 1 or d.val_fraction + d.test_fraction >= 1:
        raise ConfigError(f"`data.test_fraction` = {d.test_fraction!r} must be in [0, 1) and leave training data "
                          f"next to `data.val_fraction` = {d.val_fraction!r}")
    _positive("data.prefetch", d.prefetch, strict=False)
    _positive("data.resident_mb", d.resident_mb, strict=False)
    _positive("data.gather_threads", d.gather_threads)
    if d.batch_dtype not in DATA_BATCH_DTYPES:
        raise ConfigError(f"`data.batch_dtype` = {d.batch_dtype!r} is not one of {', '.join(DATA_BATCH_DTYPES)}"
                          f"{suggest(d.batch_dtype, list(DATA_BATCH_DTYPES))}")
    if d.batch_dtype != "float32" and d.source != "store":
        raise ConfigError(f'`data.batch_dtype` = {d.batch_dtype!r} needs `data.source` = "store" '
                          f"(it is {d.source!r}; the synthetic and module:factory sources hand out float32)")


# -- [metrics] observers (stride.metrics.observe) -------------------------------------------------
def _validate_observe(cfg: RunConfig) -> None:
    m = cfg.metrics
    if not 0 <= m.prometheus_port <= 65535:
        raise ConfigError(f"`metrics.prometheus_port` = {m.prometheus_port} must be in 0..65535 (0: pick a free port)")
    if not m.prometheus_host.strip():
        raise ConfigError("`metrics.prometheus_host` is empty: use 127.0.0.1 (localhost) or an address to bind")
    _positive("metrics.system_sample_s", m.system_sample_s, strict=False)
