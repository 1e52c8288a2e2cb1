"""Workloads by name, and `module:factory` models brought by the user.

Adding a workload: its folder (model.py, workload.py with its sizes and builder, and a `parallel_plan`
on the model if it can be split: see plan.py) and one line below.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from torch import nn

from stride.config.errors import ConfigError, suggest
from stride.config.plugins import call_factory
from stride.config.schema import ModelConfig
from stride.models.mlp.workload import build_mlp
from stride.models.recurrent.workload import build_deeplob, build_lstm, build_tcn, tcn_blocks, tcn_resume_hint
from stride.models.transformer.workload import build_token_lm, build_ts_transformer
from stride.models.workload import Builder

WORKLOADS: dict[str, Builder] = {
    "ts_transformer": build_ts_transformer,
    "token_lm": build_token_lm,
    "mlp": build_mlp,
    "lstm": build_lstm,
    "tcn": build_tcn,
    "deeplob": build_deeplob,
}

# Checks of `model.n_layers` against the rest of the config that the builder makes: stride.models.size runs them
# where it counts a deep model from builds of 1 and 2 blocks, so it refuses what the build would
DEPTH_CHECKS: dict[str, Callable[[ModelConfig, int], object]] = {"tcn": tcn_blocks}


def check_depth(cfg: ModelConfig, seq_len: int) -> None:
    """Raise the builder's ConfigError for a block count it refuses (tcn blocks dilated past the window)."""
    if (check := DEPTH_CHECKS.get(cfg.name)) is not None:
        check(cfg, seq_len)


def build_model(cfg: ModelConfig, n_features: int, seq_len: int, n_horizons: int) -> nn.Module:
    """A registered workload, or a user factory called as factory(n_features=, seq_len=, n_horizons=, **kwargs)."""
    if ":" in cfg.name:
        return call_factory(cfg.name, "model.name", nn.Module, n_features=n_features, seq_len=seq_len,
                            n_horizons=n_horizons, **cfg.kwargs)
    if cfg.name not in WORKLOADS:
        raise ConfigError(
            f"`model.name` = {cfg.name!r} is not a workload{suggest(cfg.name, list(WORKLOADS))}; "
            f"workloads are {', '.join(WORKLOADS)}, or give `module:factory`"
        )
    return WORKLOADS[cfg.name](cfg, n_features, seq_len, n_horizons)


def blocks_in(names: Iterable[str]) -> int:
    """How many blocks `model.blocks` holds among state-dict entry names (without "model."): 1 + the highest index."""
    found = [int(p[1]) for n in names if len(p := n.split(".", 2)) > 2 and p[0] == "blocks" and p[1].isdigit()]
    return max(found) + 1 if found else 0


def checkpoint_model_hint(cfg: ModelConfig, saved: Iterable[str]) -> str:
    """For a checkpoint whose model entries (`saved`, names without "model.") are not the built model's: the config
    keys that shape the entries, as this run sets them, the checkpoint's block count, and where a workload changed
    what a key means, how a run saved before resumes."""
    keys = [f"`model.name` = {cfg.name!r}"]
    if ":" in cfg.name:
        keys.append(f"`model.kwargs` = {cfg.kwargs!r}")
    else:
        n = cfg.n_layers if cfg.n_layers is not None else "none (the size row's)"
        keys += [f"`model.size` = {cfg.size!r}", f"`model.n_layers` = {n}"]
    blocks = blocks_in(saved)
    text = f"this run's model is shaped by {', '.join(keys)}"
    if blocks:
        text += f"; the checkpoint's `model.blocks` holds {blocks} blocks"
    if cfg.name == "tcn" and blocks:
        text += f"; {tcn_resume_hint(blocks)}"
    return text
