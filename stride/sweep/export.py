"""One point of a sweep as an ordinary stride checkpoint, which `stride train` resumes like its own.

The point's final state (model, optimizer moments and step counts, step, data position) is put into a
`Trainer` built from the point's config exactly as `stride train` builds it, and saved with the
checkpoint package's own code (`train_state.capture`, `CheckpointStore.save`): the same DCP layout, meta
(config and its hash) and manifest as a checkpoint written during training. So the resume path needs
nothing new: `stride train CONFIG --set <the point's grid values> --set checkpoint.enabled=true --out DIR`
finds `DIR/checkpoints/step_N`, accepts the config, and continues at step N.

The generators are captured in the exporting process after the Trainer seeded itself and built the
model, which is where the solo run's generators stand at every step when nothing in training draws from
them (no dropout). The fault guard's loss window starts empty.
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path
from typing import Any

import torch

from stride.checkpoint import train_state
from stride.checkpoint.guard import StepGuard
from stride.checkpoint.store import CheckpointStore
from stride.config import RunConfig, config_hash, config_to_dict
from stride.train.trainer import Trainer


def solo_state(trainer: Trainer) -> dict[str, Any]:
    """A finished solo Trainer's state in the form packed points keep (so every point exports alike)."""
    names = {p: n for n, p in trainer.model.named_parameters()}
    optim = {names[p]: {k: v.detach().clone() if torch.is_tensor(v) else torch.tensor(v) for k, v in st.items()}
             for p, st in trainer.optimizer.state.items() if p in names}
    return {"model": {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}, "optim": optim,
            "step": trainer.step, "data": trainer.data_position()}


def export_checkpoint(cfg: RunConfig, state: dict[str, Any], run_dir: Path, log=print) -> Path:
    """Write `state` (PackedTrainer.model_state / solo_state) as `run_dir/<checkpoint.dir>/step_N`; returns it."""
    cfg = copy.deepcopy(cfg)
    cfg.metrics.progress = False
    run_dir = Path(run_dir)
    trainer = Trainer(config=cfg, out=run_dir, write_run_dir=False)
    trainer.setup()
    trainer.model.load_state_dict(state["model"])
    params = dict(trainer.model.named_parameters())
    for name, st in state["optim"].items():
        p = params[name]
        trainer.optimizer.state[p] = {k: v.to(torch.float32) if k == "step" else v.to(p.device) for k, v in st.items()}
    step = int(state["step"])
    with warnings.catch_warnings():  # "scheduler.step() before optimizer.step()": replaying the schedule only
        warnings.simplefilter("ignore", UserWarning)
        for _ in range(step):
            trainer.scheduler.step()
    trainer.load_state_dict({**trainer.state_dict(), "step": step})
    c = cfg.checkpoint
    root = Path(c.dir) if Path(c.dir).is_absolute() else run_dir / c.dir
    store = CheckpointStore(root, c.keep_last, c.keep_every, c.verify == "checksum", log)
    store.prepare()
    guard = StepGuard(c.nan_rollback_after, c.spike_threshold, c.spike_window, c.spike_action, log)
    snapshot = train_state.capture(trainer, guard.state_dict())
    # the point's data position (the loader's state, or batches to replay), not this fresh trainer's
    snapshot["rank0"]["data"] = train_state.to_json(state["data"])
    meta = {"config": config_to_dict(cfg), "config_hash": config_hash(cfg), "world_size": 1}
    store.save(snapshot, step, meta)
    store.wait()
    store.close()
    return store.folder(step)
