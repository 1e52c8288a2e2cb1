"""The operator census of a stride run config: its model, loss, batch shapes, precision and optimizer."""

from __future__ import annotations

from torch import nn

from stride.config import config_hash
from stride.config.errors import ConfigError
from stride.config.schema import RunConfig
from stride.data.build import build_data
from stride.models.registry import build_model
from stride.optim.factory import build_optimizer
from stride.perfmodel.census import WorkloadCensus
from stride.perfmodel.census_step import CensusInputs, take_census
from stride.train.apply import apply_activation_checkpointing
from stride.train.loss import resolve_loss


def census_inputs(cfg: RunConfig, micro_batch: int | None = None, name: str = "",
                  checkpoint: str | None = None) -> CensusInputs:
    """CensusInputs of a stride run config: its model, loss, batch shapes, precision and optimizer.

    `micro_batch` defaults to the config's per-step micro-batch on one process
    (batch_size / grad_accum); `checkpoint` overrides `train.activation_checkpointing`."""
    t = cfg.train
    if t.kernels != "torch":
        raise ConfigError(f"`train.kernels` = {t.kernels!r}: the operator census models the torch kernels only")
    bundle = build_data(cfg.data, t.batch_size, validation=t.validates)
    x0, y0 = next(iter(bundle.train))
    mb = micro_batch or max(1, t.batch_size // t.grad_accum)
    m = cfg.model

    def build() -> nn.Module:
        return build_model(m, bundle.n_features, bundle.seq_len, bundle.n_horizons)

    def loss(model: nn.Module):
        return resolve_loss(model, cfg)  # the trainer's choice (kernels are torch here)

    ac = t.activation_checkpointing if checkpoint is None else checkpoint
    return CensusInputs(
        name=name or m.name, build_model=build, build_loss=loss,
        x_shape=(mb, *x0.shape[1:]), x_dtype=x0.dtype, y_shape=(mb, *y0.shape[1:]), y_dtype=y0.dtype,
        precision=t.precision, build_optimizer=lambda ps: build_optimizer(ps, cfg.optim),
        optimizer_name=f"{cfg.optim.name}:{cfg.optim.impl}", grad_clip=t.grad_clip,
        checkpoint_blocks=None if ac == "none" else (lambda mod: apply_activation_checkpointing(mod, ac, t.ac_every)),
    )


_CACHE: dict[tuple, WorkloadCensus] = {}


def workload_census(cfg: RunConfig, micro_batch: int | None = None, name: str = "") -> WorkloadCensus:
    """The census of a run config (cached by config hash and micro-batch): ~0.2-2 s per new size."""
    key = (config_hash(cfg), micro_batch, name)
    if key not in _CACHE:
        # activation checkpointing is a layout choice the cost model prices from the plain census
        _CACHE[key] = take_census(census_inputs(cfg, micro_batch, name, checkpoint="none"))
    return _CACHE[key]
