"""Async saves with the staging copy in the background: the snapshot is the save step's state, and the wait counts.

The copy is slowed down (0.3 s per save) so the next optimizer step certainly comes while the copy
still reads the live tensors: without the fence before the optimizer step, the saved moments and
parameters would hold a later step's values.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from ckpt_helpers import ckpt_config, fit
from torch.distributed.checkpoint.staging import DefaultStager

from stride.checkpoint import CheckpointStore, train_state
from stride.train.trainer import Callback, Trainer

SLOW_S = 0.3


@pytest.fixture
def slow_staging(monkeypatch: pytest.MonkeyPatch) -> None:
    real = DefaultStager._stage  # noqa: SLF001

    def slow(self, state_dict, **kwargs):
        time.sleep(SLOW_S)  # the copy below then reads tensors the next step wants to change
        return real(self, state_dict, **kwargs)

    monkeypatch.setattr(DefaultStager, "_stage", slow)


def test_background_staging_snapshot_is_the_save_steps_state(tmp_path: Path, slow_staging: None) -> None:
    seen: dict[int, dict[str, torch.Tensor]] = {}

    class Record(Callback):
        def on_step_end(self, trainer: Trainer) -> None:
            if trainer.step in (6, 12):
                _, osd = train_state.get_state_dict(trainer.model, trainer.optimizer)
                seen[trainer.step] = {**{f"model.{k}": v.clone() for k, v in trainer.model.state_dict().items()},
                                      **{f"optim.{p}.{k}": v.clone() for p, st in osd["state"].items()
                                         for k, v in st.items()}}

    out = tmp_path / "run"
    s = fit(out, "checkpoint.async_save=true", "checkpoint.staging=background", "checkpoint.every=6",
            "checkpoint.keep_last=10", "train.steps=14", callbacks=[Record()])
    cfg = ckpt_config("train.steps=3", "checkpoint.every=0", "checkpoint.save_at_end=false")
    for step in (6, 12):
        tr = Trainer(config=cfg, write_run_dir=False)
        tr.setup()
        store = CheckpointStore(out / "checkpoints", log=lambda m: None)
        loaded = store.load(store.folder(step), lambda keys, tr=tr: train_state.load_template(tr, keys))
        store.close()
        got = {**{f"model.{k}": v for k, v in loaded["model"].items()},
               **{f"optim.{p}.{k}": v for p, st in loaded["optim"]["state"].items() for k, v in st.items()}}
        assert got.keys() == seen[step].keys()
        for k, v in seen[step].items():
            assert torch.equal(got[k], v), (step, k)
    torch.use_deterministic_algorithms(False)
    parts = s["checkpoint"]["stall_parts_s"]
    # each background copy blocked the next optimizer step for most of its 0.3 s, and that wait is booked
    assert parts["fence_wait_s"] >= 2 * (SLOW_S - 0.1)
    assert s["checkpoint_stall_s"] >= parts["fence_wait_s"]
    assert s["step_time_breakdown_s"]["checkpoint"] > 0


@pytest.mark.parametrize("staging", ["loop", "auto"])  # auto: in the loop on CPU
def test_staging_in_the_loop_blocks_for_the_copy(tmp_path: Path, slow_staging: None, staging: str) -> None:
    s = fit(tmp_path / "run", "checkpoint.async_save=true", "checkpoint.every=6", "train.steps=8",
            f"checkpoint.staging={staging}")
    parts = s["checkpoint"]["stall_parts_s"]
    assert "fence_wait_s" not in parts and parts["stage_copy_s"] >= SLOW_S  # one save: the copy blocked the loop
