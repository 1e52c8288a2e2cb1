"""Checks that relate several fields, run after every field has passed its own (schema.py, via fields.py).

A single key's type, choices and range belong to the schema; what is here needs two keys or more.
"""

from __future__ import annotations

from dataclasses import fields

from stride.config.errors import ConfigError, suggest
from stride.config.fields import check_fields
from stride.config.schema import SHARDED_PARAM_OPTIMIZERS, DataConfig, RunConfig


def validate(cfg: RunConfig) -> None:
    """Every field against the schema (a config built in Python skipped the loader), then the relations."""
    check_fields(cfg)
    validate_relations(cfg)


def validate_relations(cfg: RunConfig) -> None:
    """The checks between keys alone: what a sweep point runs, whose every key already passed its own check (the
    base config's in load_config, each grid value in set_key; check_fields was 3/4 of building a point)."""
    _validate_train(cfg)
    _validate_optim(cfg)
    _validate_checkpoint(cfg)
    _validate_parallel(cfg)
    _validate_data(cfg)
    _validate_kwargs(cfg)


def _validate_train(cfg: RunConfig) -> None:
    m, d, t = cfg.model, cfg.data, cfg.train
    if t.batch_size % t.grad_accum:
        raise ConfigError(
            f"`train.batch_size` = {t.batch_size} is not divisible by `train.grad_accum` = {t.grad_accum}: "
            "each micro-batch must have the same size "
            f"(try batch_size = {t.batch_size // t.grad_accum * t.grad_accum or t.grad_accum}; under data parallelism "
            f"a multiple of {t.grad_accum} x the data-parallel degree, as `train.batch_size` is the global batch)"
        )
    if m.loss == "quantile" and not m.quantiles:
        raise ConfigError(f"`model.quantiles` = {m.quantiles!r} must be numbers in (0, 1) with `model.loss` = quantile")
    if d.seq_len % m.patch_len:
        raise ConfigError(f"`data.seq_len` = {d.seq_len} is not divisible by `model.patch_len` = {m.patch_len}")
    if t.target_val_loss is not None and t.val_every == 0:
        raise ConfigError("`train.target_val_loss` needs validation: set `train.val_every` > 0")


def _validate_optim(cfg: RunConfig) -> None:
    o = cfg.optim
    b1, b2 = o.betas
    if o.name == "adamw8bit" and b1 > 0.0 and b1 * b1 >= b2:
        # the relation stride.optim.adamw8bit refuses when the optimizer is built (its stored m / (sqrt(v) + eps) is
        # bounded only for beta1^2 < beta2: (0.9, 0.1) drifted 3-7 % from AdamW, (0.9, 0.0) up to 223 %), here before
        # a run or a sweep point starts
        raise ConfigError(
            f"`optim.betas` = {list(o.betas)} with `optim.name` = 'adamw8bit': beta1^2 >= beta2, where its 8-bit "
            "first moment (stored as m / (sqrt(v) + eps)) is unbounded; use beta2 > beta1^2 (e.g. [0.9, 0.95]) or "
            "`optim.name` = 'adamw' or 'adamw_triton' (fp32 moments) for these betas"
        )


def _validate_checkpoint(cfg: RunConfig) -> None:
    c = cfg.checkpoint
    if c.spike_action == "rollback" and c.spike_threshold is not None and not c.enabled:
        raise ConfigError("`checkpoint.spike_action` = 'rollback' needs checkpoints: set `checkpoint.enabled` = true")


def _validate_parallel(cfg: RunConfig) -> None:
    """Relations within [parallel]; those to the world size and the model are checked in stride.parallel.layout."""
    p = cfg.parallel
    if p.comm_hook != "none" and p.dp_shard > 1:
        raise ConfigError(
            f"`parallel.comm_hook` = {p.comm_hook!r} is a DDP hook but `parallel.dp_shard` = {p.dp_shard} "
            "selects FSDP2: use `parallel.mp_param_dtype` to communicate in low precision there"
        )
    sharded = [f"`parallel.{k}` = {v}" for k, v in (("dp_shard", p.dp_shard), ("tp", p.tp)) if v > 1]
    if sharded and cfg.optim.name not in SHARDED_PARAM_OPTIMIZERS:
        # refused here, before any rank starts: each rank's optimizer would raise the same TypeError at set-up
        ddp = "" if p.tp > 1 else f", or `parallel.dp_replicate` (DDP: whole parameters) to keep {cfg.optim.name}"
        raise ConfigError(
            f"`optim.name` = {cfg.optim.name!r} cannot update the sharded (DTensor) parameters of "
            f"{' and '.join(sharded)}: its state needs each parameter whole, not a rank's shard; use `optim.name` = "
            f"one of {', '.join(repr(n) for n in SHARDED_PARAM_OPTIMIZERS)} there{ddp}"
        )
    if p.pp > 1 and cfg.train.precision == "fp16":
        raise ConfigError(
            f"`train.precision` = 'fp16' with `parallel.pp` = {p.pp}: the pipeline schedule runs backward itself, "
            "outside the fp16 loss scaler; use 'bf16' (no loss scaling needed) or 'fp32'"
        )


def _validate_data(cfg: RunConfig) -> None:
    for name, values in (("data.horizons", cfg.data.horizons), ("model.quantiles", cfg.model.quantiles)):
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:  # [1, 1]: two identical targets (or outputs), one loss term counted twice
            raise ConfigError(f"`{name}` = {values!r} lists {', '.join(map(str, twice))} twice: each once")
    d = cfg.data
    if d.source == "store" and not d.store:
        raise ConfigError('`data.source` = "store" needs `data.store` = the directory from `stride data ingest`')
    if d.normalize == "rolling" and d.normalize_window < 2:
        raise ConfigError(f"`data.normalize_window` = {d.normalize_window} must be >= 2 rows with "
                          '`data.normalize` = "rolling" (the rows each rolling mean/std is taken over)')
    if d.normalize != "rolling" and d.normalize_window != 0:
        raise ConfigError(f"`data.normalize_window` = {d.normalize_window} is only used with "
                          f'`data.normalize` = "rolling" (it is {d.normalize!r}); remove it or set normalize')
    if d.val_fraction + d.test_fraction >= 1:
        raise ConfigError(f"`data.test_fraction` = {d.test_fraction!r} must be in [0, 1) and leave training data "
                          f"next to `data.val_fraction` = {d.val_fraction!r}")
    if d.source == "synthetic":
        # store keys beside the synthetic source were ignored without a word: `--set data.store=runs/store` without
        # data.source=store trained on the simulated market (first-contact audit of 2026-12-07)
        default = DataConfig()
        unused = [k for k in ("store", "columns", "target_column", "cross_days")
                  if getattr(d, k) != getattr(default, k)]
        if unused:
            shown = ", ".join(f"`data.{k}` = {getattr(d, k)!r}" for k in unused)
            raise ConfigError(f'{shown}: read only with `data.source` = "store" (it is "synthetic", so the run would '
                              'train on the simulated market, not your data); add --set data.source=store, or remove '
                              f"{'it' if len(unused) == 1 else 'them'}")
    if d.batch_dtype != "float32" and d.source != "store":
        raise ConfigError(f'`data.batch_dtype` = {d.batch_dtype!r} needs `data.source` = "store" '
                          f"(it is {d.source!r}; the synthetic and module:factory sources hand out float32)")


def _validate_kwargs(cfg: RunConfig) -> None:
    """`kwargs` go to a `module:factory` only: a built-in model or source takes none, and ignoring them hid typos."""
    for section, key, built_in in (("model", "name", cfg.model), ("data", "source", cfg.data)):
        kwargs, name = built_in.kwargs, getattr(built_in, key)
        if not kwargs or ":" in name:
            continue
        own = [f.name for f in fields(built_in) if f.name != "kwargs"]
        first = next(iter(kwargs))
        hint = (f"; set `{section}.{first}` instead" if first in own else suggest(first, own).replace(
            "`", f"`{section}.", 1)) if isinstance(first, str) else ""
        raise ConfigError(
            f"`{section}.kwargs` = {kwargs!r} is passed only to a `{section}.{key}` of the form `module:factory`; the "
            f"built-in {name!r} takes no kwargs (its settings are the [{section}] keys){hint}")
