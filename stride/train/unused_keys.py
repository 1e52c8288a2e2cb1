"""[train], [optim] and [model] keys the run's other choices leave without effect: named once, by rank 0.

Why: the run succeeds without them, so a user would believe a switch was applied that was not (`train.ac_every = 4`
with `train.activation_checkpointing = "full"` checkpoints every block; `optim.eps` with adafactor, whose own eps
regularises g^2, is not passed). Not an error: one config serves runs that toggle the switch with `--set`.
The [parallel] keys have their own notice (stride.parallel.unused_keys).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from stride.config.reference import default_text
from stride.config.schema import ModelConfig, OptimConfig, RunConfig, TrainConfig
from stride.kernels.runtime import notice_once

# (section, key) -> (whether the key acts under this config, what it acts on, for the notice)
_Acts = tuple[Callable[[RunConfig], bool], str]
_ACTS_ON: dict[tuple[str, str], _Acts] = {
    ("train", "ac_every"): (lambda c: c.train.activation_checkpointing == "every_k",
                            "`train.activation_checkpointing` = 'every_k'"),
    ("optim", "momentum"): (lambda c: c.optim.name == "sgd", "`optim.name` = 'sgd'"),
    ("optim", "betas"): (lambda c: c.optim.name != "sgd", "the Adam-style optimizers (not sgd)"),
    ("optim", "eps"): (lambda c: c.optim.name not in ("sgd", "adafactor"),
                       "adamw, adamw_triton and adamw8bit (adafactor's eps regularises g^2 and is its own; sgd has "
                       "none)"),
    ("optim", "min_lr_ratio"): (lambda c: c.optim.schedule == "cosine", "`optim.schedule` = 'cosine'"),
    ("model", "huber_delta"): (lambda c: c.model.loss == "huber", "`model.loss` = 'huber'"),
    ("model", "quantiles"): (lambda c: c.model.loss == "quantile", "`model.loss` = 'quantile'"),
    # the transformers' own keys: the other workloads' builders never read them (outside audit of the models)
    ("model", "n_heads"): (lambda c: c.model.name in _TRANSFORMERS, "ts_transformer and token_lm"),
    ("model", "ffn_mult"): (lambda c: c.model.name in _TRANSFORMERS, "ts_transformer and token_lm"),
    ("model", "patch_len"): (lambda c: c.model.name == "ts_transformer", "`model.name` = 'ts_transformer'"),
    ("model", "causal"): (lambda c: c.model.name == "ts_transformer",
                          "`model.name` = 'ts_transformer' (token_lm is always causal, lstm and tcn are causal, "
                          "deeplob and mlp read the whole window)"),
    ("model", "n_layers"): (lambda c: c.model.name in _LAYERED,
                            "ts_transformer, token_lm, mlp, lstm and tcn (deeplob has one LSTM layer; a "
                            "`module:factory` model takes `model.kwargs`)"),
    ("model", "d_model"): (lambda c: ":" not in c.model.name, "the built-in workloads (a `module:factory` model "
                                                              "takes `model.kwargs`)"),
    ("model", "dropout"): (lambda c: c.model.name in _LAYERED, "ts_transformer, token_lm, mlp, lstm and tcn (deeplob "
                                                               "has no dropout; a `module:factory` model takes "
                                                               "`model.kwargs`)"),
}
_TRANSFORMERS = ("ts_transformer", "token_lm")
_LAYERED = ("ts_transformer", "token_lm", "mlp", "lstm", "tcn")
_DEFAULTS = {"train": TrainConfig(), "optim": OptimConfig(), "model": ModelConfig()}


def unused_keys(cfg: RunConfig) -> list[str]:
    """The keys of `_ACTS_ON` set away from their default that do nothing under `cfg`, each with what it acts on."""
    out = []
    for (section, key), (acts, what) in _ACTS_ON.items():
        value = getattr(getattr(cfg, section), key)
        if value != getattr(_DEFAULTS[section], key) and not acts(cfg):
            out.append(f"`{section}.{key}` = {default_text(value)} acts on {what} only")
    return out


def notice_unused_keys(cfg: RunConfig, rank: int | None = None) -> None:
    """Say once, on one line and from rank 0 only, which set keys this config leaves without effect (see above)."""
    rank = int(os.environ.get("RANK", "0")) if rank is None else rank
    unused = unused_keys(cfg) if rank == 0 else []
    if unused:
        text = "; ".join(unused)
        notice_once("train-unused-keys:" + text, "stride.train: no effect in this run: " + text)
