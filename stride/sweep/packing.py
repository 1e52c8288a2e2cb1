"""Which sweep points can train in one pack, and what packed training supports.

Models of a pack share one architecture and one batch stream layout, and may differ only in the
settings listed in PER_MODEL_KEYS: seed, optimizer and schedule settings, clipping, dropout rate, loss
parameters, step budget and target, and the data seed (its own data and order: a separate gather). Any
other key that differs puts points in different packs, and the report names the keys that split them
(a key that changes shapes, e.g. `model.d_model`, always does: it is never silently ignored).

`[metrics]` keys are not compared (where results go, how they are shown), except those that change what a
packed point records: `metrics.log_every` (the steps its log holds) and `metrics.skip_steps` (the steps its
timing leaves out), which the pack takes from its first model. They split packing classes: a pack logged every
point at the first point's `log_every` (audit 10, F9). The trackers (`tensorboard`, `prometheus`, `mlflow`,
`wandb`) are refused for packing (`check_packable`): a packed point goes to no tracker, where its solo run would.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from stride.config import RunConfig
from stride.config.errors import ConfigError
from stride.config.loader import config_view

# Settings each model of a pack may have for itself (none changes a shape).
PER_MODEL_KEYS = frozenset({
    "train.seed", "train.steps", "train.grad_clip", "train.target_val_loss", "train.name",
    "optim.lr", "optim.weight_decay", "optim.betas", "optim.eps", "optim.momentum", "optim.warmup_steps",
    "optim.schedule", "optim.min_lr_ratio",
    "model.dropout", "model.huber_delta", "model.quantiles",
    "data.seed",
})
# Not compared at all: where results go and how they are shown ...
IGNORED_SECTIONS = ("metrics",)
# ... except these, which change what a packed point records (PackedTrainer reads them from its first model)
PACK_METRICS = frozenset({"metrics.log_every", "metrics.skip_steps"})
# trackers a packed point cannot feed: each would get one run per point from the Trainer
TRACKERS = ("tensorboard", "prometheus", "mlflow", "wandb")


def pack_key(cfg: RunConfig) -> str:
    """Equal for two configs exactly when their models can share a pack: a JSON object of the shared keys, sorted
    (the keys to compare are listed once per config class: a 100,000-point sweep plans in seconds)."""
    sections = config_view(cfg)
    shared = {k: sections[s][name] for k, s, name in _shared_keys(type(cfg), sections)}
    if cfg.model.loss == "quantile":  # the number of levels sizes the head; the levels themselves are per model
        shared["model.quantiles#count"] = len(cfg.model.quantiles)
    return json.dumps(shared, sort_keys=True, default=str)


_SHARED: dict[type, list[tuple[str, str, str]]] = {}


def _shared_keys(cls: type, sections: dict[str, dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(`section.key`, section, key) of every key two packed models must share, sorted; once per config class."""
    if cls not in _SHARED:
        _SHARED[cls] = sorted((f"{s}.{k}", s, k) for s, sec in sections.items() for k in sec
                              if f"{s}.{k}" not in PER_MODEL_KEYS
                              and (s not in IGNORED_SECTIONS or f"{s}.{k}" in PACK_METRICS))
    return _SHARED[cls]


def split_keys(cfgs: list[RunConfig]) -> list[str]:
    """The keys whose values separate these configs into different packs."""
    keys: set[str] = set()
    base = json.loads(pack_key(cfgs[0]))
    for c in cfgs[1:]:
        other = json.loads(pack_key(c))
        keys |= {k for k in set(base) | set(other) if base.get(k) != other.get(k)}
    return sorted(k.replace("#count", " (count)") for k in keys)


def check_packable(cfg: RunConfig) -> None:
    """A ConfigError naming the first setting packed training does not reproduce (use --pack 1 for it)."""
    from stride.sweep.packed_optim import check_supported

    check_supported(cfg.optim)
    t, p = cfg.train, cfg.parallel
    refusals = [
        (t.precision == "fp16", "`train.precision` = 'fp16' (a loss scaler per model); use bf16 or fp32"),
        (t.compile != "off", f"`train.compile` = {t.compile!r}"),
        (t.activation_checkpointing != "none", f"`train.activation_checkpointing` = {t.activation_checkpointing!r}"),
        (t.kernels != "torch", f"`train.kernels` = {t.kernels!r}"),
        (any(getattr(p, k) != 1 for k in ("dp_replicate", "dp_shard", "tp", "pp")), "a [parallel] layout"),
        (cfg.checkpoint.enabled, "`checkpoint.enabled` = true (a packed point is exported as a checkpoint "
                                 "afterwards: stride sweep --export)"),
        (any(getattr(cfg.metrics, k) for k in TRACKERS),
         f"metrics trackers ({', '.join(f'metrics.{k}' for k in TRACKERS if getattr(cfg.metrics, k))}: each point "
         "would be a run of its own there)"),
    ]
    for refused, what in refusals:
        if refused:
            raise ConfigError(f"packed training does not support {what}; train such points one by one (--pack 1)")


@dataclass
class Pack:
    """Points (indices into the sweep's point list) that train together."""

    key: str
    members: list[int] = field(default_factory=list)


def group(cfgs: list[RunConfig], pack_size: int) -> list[Pack]:
    """Packs of at most `pack_size` compatible points, in point order within each compatibility class."""
    if pack_size < 1:
        raise ConfigError(f"--pack {pack_size}: need at least 1")
    classes: dict[str, list[int]] = {}
    for i, c in enumerate(cfgs):
        classes.setdefault(pack_key(c), []).append(i)
    packs = []
    for key, idx in classes.items():
        for lo in range(0, len(idx), pack_size):
            packs.append(Pack(key, idx[lo : lo + pack_size]))
    return packs
