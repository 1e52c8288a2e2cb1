"""What a checkpoint holds, gathered from a trainer and put back into one (through `TrainerView`).

Tensors (model, optimizer, RNG states) go through DCP, so each rank writes its own shards and a
load may use another world size or layout (`get_state_dict`/`set_state_dict` handle FSDP and DDP).
The small non-tensor parts (step, LR schedule, loss scaler, data position, fault-guard history)
travel as one JSON string per section: DCP stores a string as bytes, and JSON needs no unpickling.
"""

from __future__ import annotations

import json
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

from stride.checkpoint.rng import capture_rng, restore_rng
from stride.parallel.ranks import rank_and_world
from stride.train.callbacks import TrainerView


def _options(flat: bool) -> StateDictOptions:
    """Under pipeline parallelism the optimizer state is saved flat, keyed by parameter name (param_groups
    too, as torchtitan does): each rank's optimizer holds other parameters, and the nested
    `param_groups[0].params` list every rank saves would collide under one key. Flat keys also load
    into another layout (pp=2 -> pp=1). Other runs keep the nested form; a load follows the file."""
    return StateDictOptions(flatten_optimizer_state_dict=flat)


def to_json(obj: Any) -> str:
    def default(o: Any) -> Any:
        if isinstance(o, torch.Tensor) and o.numel() == 1:
            return o.item()
        if hasattr(o, "item"):
            return o.item()
        if isinstance(o, tuple):
            return list(o)
        raise TypeError(f"checkpoint state holds a {type(o).__name__}, which is not JSON: {o!r}")

    return json.dumps(obj, default=default)


def capture(trainer: TrainerView, guard_state: dict[str, Any]) -> dict[str, Any]:
    """The state dict handed to dcp.save / async_save (tensors are live references: DCP stages them)."""
    rank, _ = rank_and_world()
    model_sd, optim_sd = get_state_dict(trainer.model, trainer.optimizer, options=_options(trainer.pipelined))
    extras = {**trainer.state_dict(), "guard": guard_state}  # step, skipped_steps, scheduler, scaler
    return {
        "model": model_sd,
        "optim": optim_sd,
        "train": to_json(extras),
        f"rank{rank}": {"rng": capture_rng(), "data": to_json(trainer.data_position())},
    }


def load_template(trainer: TrainerView, saved_keys: set[str]) -> dict[str, Any]:
    """A state dict of the right structure for dcp.load; this rank's section only if it was saved."""
    rank, _ = rank_and_world()
    flat = "optim.param_groups.0.params" not in saved_keys  # nested form: a list of names per group
    model_sd, optim_sd = get_state_dict(trainer.model, trainer.optimizer, options=_options(flat))
    adapt = getattr(trainer.optimizer, "checkpoint_template", None)
    if adapt is not None:  # an optimizer that reads older state formats (AdamW8bit): DCP loads what was saved
        optim_sd = adapt(optim_sd, {k[len("optim."):] for k in saved_keys if k.startswith("optim.")})
    out: dict[str, Any] = {"model": model_sd, "optim": optim_sd, "train": ""}
    if any(k.startswith(f"rank{rank}.") for k in saved_keys):
        rng = capture_rng()
        rng = {k: v for k, v in rng.items() if f"rank{rank}.rng.{k}" in saved_keys}
        out[f"rank{rank}"] = {"rng": rng, "data": ""}
    return out


def apply(trainer: TrainerView, loaded: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Put a loaded state into the trainer; returns (guard state, notes on what could not be restored)."""
    rank, _ = rank_and_world()
    notes: list[str] = []
    set_state_dict(trainer.model, trainer.optimizer, model_state_dict=loaded["model"],
                   optim_state_dict=loaded["optim"], options=_options("param_groups" not in loaded["optim"]))
    extras = json.loads(loaded["train"])
    trainer.load_state_dict(extras)
    section = loaded.get(f"rank{rank}")
    if section is None:
        notes.append(f"the checkpoint has no RNG or data state for rank {rank} (saved with fewer ranks): "
                     "this rank keeps its seeded RNG and replays its data from the start")
        trainer.resume_data({"kind": "replay", "batches": trainer.step})
    else:
        trainer.resume_data(json.loads(section["data"]))
        notes += restore_rng(section["rng"])
    return extras.get("guard") or {}, notes
