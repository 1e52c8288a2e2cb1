"""The callback interface: what a callback sees, the hooks it gets, and how a run's callbacks are assembled."""

from __future__ import annotations

import torch
from helpers import small_config

from stride.checkpoint import CheckpointCallback
from stride.metrics.observe.system import SystemCallback
from stride.metrics.observe.tensorboard import TensorBoardCallback
from stride.train.callbacks import Callback, TrainerView
from stride.train.trainer import Trainer


class Gate(Callback):
    """Says no at the steps in `deny`; records every step it was asked at."""

    def __init__(self, deny: set[int]) -> None:
        self.deny, self.asked = deny, []

    def before_optimizer_step(self, trainer: TrainerView, loss: torch.Tensor, grad_norm: torch.Tensor | None) -> bool:
        self.asked.append(trainer.step + 1)
        return trainer.step + 1 not in self.deny


class Logged(Callback):
    def __init__(self) -> None:
        self.records: list[dict] = []

    def on_log(self, trainer: TrainerView, record) -> None:
        self.records.append(dict(record))


def _params(trainer: Trainer) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in trainer.model.parameters()])


def test_a_gate_that_says_no_skips_the_update_and_every_gate_is_asked() -> None:
    class Snapshot(Callback):
        def __init__(self) -> None:
            self.params: dict[int, torch.Tensor] = {}

        def on_step_end(self, trainer: TrainerView) -> None:
            self.params[trainer.step] = _params(trainer)  # type: ignore[arg-type]

    first, second, snap = Gate({3}), Gate(set()), Snapshot()
    trainer = Trainer(config=small_config(train__steps=5), write_run_dir=False, callbacks=[first, second, snap])
    summary = trainer.fit().summary
    assert first.asked == second.asked == [1, 2, 3, 4, 5]  # the second gate is asked even where the first said no
    assert summary["skipped_steps"] == 1
    assert torch.equal(snap.params[2], snap.params[3])  # step 3 changed nothing
    assert not torch.equal(snap.params[3], snap.params[4])


def test_on_log_sees_every_record_the_trainer_logs() -> None:
    logged = Logged()
    trainer = Trainer(config=small_config(train__steps=6, train__val_every=3, metrics__log_every=2),
                      write_run_dir=False, callbacks=[logged])
    result = trainer.fit()
    assert logged.records == result.history
    assert [r["step"] for r in logged.records if "loss" in r] == [2, 4, 6]
    assert [r["step"] for r in logged.records if "val_loss" in r] == [3, 6]


def test_callbacks_are_the_callers_then_what_the_config_asks_for(tmp_path) -> None:
    mine = Logged()
    cfg = small_config(checkpoint__enabled=True, metrics__system_sample_s=0.5)
    trainer = Trainer(config=cfg, out=tmp_path / "a", callbacks=[mine])
    assert isinstance(trainer.callbacks, tuple)  # fixed at construction: nothing outside the trainer changes it
    assert [type(cb) for cb in trainer.callbacks] == [Logged, CheckpointCallback, SystemCallback]
    given = [TensorBoardCallback(log_dir=tmp_path / "tb"), CheckpointCallback(), mine]
    trainer = Trainer(config=small_config(checkpoint__enabled=True, metrics__tensorboard=True),
                      out=tmp_path / "b", callbacks=given)
    # a kind the caller gave takes that kind's place; the order is the caller's
    assert [type(cb) for cb in trainer.callbacks] == [TensorBoardCallback, CheckpointCallback, Logged, SystemCallback]
    assert trainer.callbacks[:3] == tuple(given)


def test_the_trainer_owns_its_state_and_data_position() -> None:
    a = Trainer(config=small_config(train__steps=4), write_run_dir=False)
    a.fit()
    state, position = a.state_dict(), a.data_position()
    assert state["step"] == 4 and position["kind"] == "state_dict"
    b = Trainer(config=small_config(train__steps=4), write_run_dir=False)
    b.setup()
    b.load_state_dict(state)
    b.resume_data(position)
    assert b.step == 4 and b.scheduler.state_dict() == a.scheduler.state_dict()
    xa, _ = a.next_batch()
    xb, _ = b.next_batch()
    assert torch.equal(xa, xb)  # b continues where a stopped, not at a fresh start
