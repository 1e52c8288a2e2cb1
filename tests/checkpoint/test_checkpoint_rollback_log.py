"""A rollback in the loop keeps one record per step in metrics.jsonl; the rolled-back steps go to rollbacks.jsonl.

Before: `nan_rollback_after = 2` with steps 8 and 9 non-finite rolled back from step 9 to the checkpoint at step 6
and left steps 7-9 in metrics.jsonl twice (the rolled-back records first, the non-finite ones with a null loss),
`timed_steps` counted 27 steps of a 24-step run, TensorBoard showed the rolled-back values, and the run-folder
spread of `stride compare` (stride.bench.stats.run_step_rates) gave none ("steps go back").
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
from ckpt_helpers import ckpt_config, inf_loss_at

from stride.bench.stats import run_step_rates
from stride.train.trainer import Trainer

OVERRIDES = ("checkpoint.nan_rollback_after=2", "metrics.tensorboard=true")


def _loss_fn(bad_calls: tuple[int, ...]):
    calls = {"n": 0}

    def loss_fn(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        loss = torch.nn.functional.mse_loss(pred, y)
        return loss * float("inf") if calls["n"] in bad_calls else loss

    return loss_fn


def _run(out: Path, bad_calls: tuple[int, ...]):
    try:
        return Trainer(config=ckpt_config(*OVERRIDES), out=out, loss_fn=_loss_fn(bad_calls)).fit()
    finally:
        torch.use_deterministic_algorithms(False)


def _records(out: Path, name: str = "metrics.jsonl") -> list[dict]:
    return [json.loads(line) for line in (out / name).read_text().splitlines()]


def _tensorboard_losses(out: Path) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(out / "tensorboard"))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars("train/loss")]


def test_a_rollback_leaves_one_record_per_step(tmp_path: Path) -> None:
    ref = _run(tmp_path / "ref", ())  # the uninterrupted run: no non-finite step, no rollback
    got = _run(tmp_path / "run", (8, 9))  # steps 8 and 9 non-finite (once): rolled back from 9 to 6, replayed
    run = tmp_path / "run"
    s, r = got.summary, ref.summary
    assert s["checkpoint"]["rollbacks"] == 1 and s["params_sha256"] == r["params_sha256"]

    records, reference = _records(run), _records(tmp_path / "ref")
    assert [x["step"] for x in records] == list(range(1, 25))
    # the redone steps 7-9 are the ones kept: their losses are the uninterrupted run's, bit for bit (same process)
    assert [x["loss"] for x in records] == [x["loss"] for x in reference]
    assert [x["lr"] for x in records] == [x["lr"] for x in reference]
    assert [x["step"] for x in got.history] == list(range(1, 25))

    # the rollback stays visible: one line in rollbacks.jsonl holding the rolled-back records, and summary.json
    (event,) = _records(run, "rollbacks.jsonl")
    assert (event["rollback"], event["from_step"], event["to_step"]) == (1, 9, 6)
    assert "2 non-finite steps in a row" in event["reason"] and event["time_s"] > 0
    assert [x["step"] for x in event["records"]] == [7, 8, 9]
    assert event["records"][0]["loss"] == reference[6]["loss"]  # step 7 trained alike both times
    assert event["records"][1]["loss"] is None and event["records"][2]["loss"] is None  # non-finite, as logged
    assert s["checkpoint"]["rolled_back_steps"] == 3
    assert s["checkpoint"]["rollback_events"] == [{k: event[k] for k in ("rollback", "from_step", "to_step",
                                                                        "reason")}]

    # the summary's timings count each step that stands once (skip_steps = 0: every step timed)
    assert s["timed_steps"] == r["timed_steps"] == 24
    assert s["skipped_steps"] == r["skipped_steps"] == 0

    # TensorBoard shows the redone values once per step (the rolled-back ones are purged by its reader)
    tb, tb_ref = _tensorboard_losses(run), _tensorboard_losses(tmp_path / "ref")
    assert [st for st, _ in tb] == list(range(1, 25))
    assert tb == tb_ref

    # a reader keyed by step (stride compare's run-folder spread) reads every timed step once
    rates, why = run_step_rates(run, json.loads((run / "summary.json").read_text()),
                                {"metrics": {"skip_steps": 0}})
    assert why is None and len(rates) == 24


def test_a_second_rollback_appends_its_own_line(tmp_path: Path) -> None:
    """Two rollbacks (steps 8-9, then 14-15 non-finite: back from 9 to 6, then from 15 to 12): one line each, and
    metrics.jsonl still holds every step once."""
    # forward calls: steps 1-9 are calls 1-9, the replayed 7-9 calls 10-12, step 10 call 13, ... step 14 call 17
    got = _run(tmp_path / "run", (8, 9, 17, 18))
    s = got.summary
    assert s["checkpoint"]["rollbacks"] == 2
    assert [x["step"] for x in _records(tmp_path / "run")] == list(range(1, 25))
    events = _records(tmp_path / "run", "rollbacks.jsonl")
    assert [(e["from_step"], e["to_step"]) for e in events] == [(9, 6), (15, 12)]
    assert [[x["step"] for x in e["records"]] for e in events] == [[7, 8, 9], [13, 14, 15]]
    assert s["timed_steps"] == 24 and s["checkpoint"]["rolled_back_steps"] == 6


def test_mlflow_marks_the_rollback_and_holds_the_redone_values_last(tmp_path: Path) -> None:
    """MLflow cannot delete a value: the rolled-back steps hold both, the redone one logged last (the value
    metrics.jsonl keeps), and the tag `stride.rolled_back` says where the run went back."""
    import os

    import pytest

    pytest.importorskip("mlflow", reason="the `mlflow` extra is not installed: the MLflow logger is not tested here")
    from mlflow import MlflowClient

    out = tmp_path / "run"
    try:
        s = Trainer(config=ckpt_config("checkpoint.nan_rollback_after=2", "metrics.mlflow=true"), out=out,
                    loss_fn=_loss_fn((8, 9))).fit().summary
    finally:
        torch.use_deterministic_algorithms(False)
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=(out / "mlflow").resolve().as_uri())
    run = client.get_run(s["mlflow_run_id"])
    assert run.data.tags["stride.rolled_back"] == "9>6"
    history = client.get_metric_history(s["mlflow_run_id"], "loss")
    last = {}
    for m in sorted(history, key=lambda m: m.timestamp):  # the later value of a step wins
        last[m.step] = m.value
    assert sorted(last) == list(range(1, 25))
    assert [last[st] for st in range(1, 25)] == [x["loss"] for x in _records(out)]


def test_a_rollback_takes_its_validations_out_of_the_tallies(tmp_path: Path, monkeypatch) -> None:
    """Validation at step 8, then steps 8-9 non-finite: rolled back from 9 to the checkpoint at 6 and step 8 validated
    again. val_time_s kept the rolled-back validation's time (7 validations booked for the 6 that stand, session 37);
    every other tally is checked against the run that never had the bad steps. The validation time is read on a
    clock that each validation moves by 1000 s (no real timing)."""
    import stride.train.trainer as trainer_mod

    offset = [0.0]
    clock = type("Clock", (), {"perf_counter": staticmethod(lambda: time.perf_counter() + offset[0]),
                               "sleep": staticmethod(time.sleep)})
    monkeypatch.setattr(trainer_mod, "time", clock)

    class Validating(Trainer):
        def evaluate(self, model=None):  # noqa: ANN001, ANN202
            offset[0] += 1000.0
            return super().evaluate(model)

    def run(out: Path, bad: tuple[int, ...]):
        loss_fn = inf_loss_at(bad)

        try:
            return Validating(config=ckpt_config(*OVERRIDES, "train.val_every=4"), out=out, loss_fn=loss_fn).fit()
        finally:
            torch.use_deterministic_algorithms(False)

    ref, got = run(tmp_path / "ref", ()), run(tmp_path / "run", (8, 9))
    s, r = got.summary, ref.summary
    assert s["checkpoint"]["rolled_back_steps"] == 3 and r["checkpoint"]["rollbacks"] == 0
    assert round(r["val_time_s"] / 1000) == 6 and round(s["val_time_s"] / 1000) == 6  # 7 before
    vals = [(x["step"], x["val_loss"]) for x in _records(tmp_path / "run") if "val_loss" in x]
    assert vals == [(x["step"], x["val_loss"]) for x in _records(tmp_path / "ref") if "val_loss" in x]
    assert [step for step, _ in vals] == [4, 8, 12, 16, 20, 24]
    assert s["final_val_loss"] == r["final_val_loss"] and s["final_train_loss"] == r["final_train_loss"]
    assert s["timed_steps"] == r["timed_steps"] == 24 and s["skipped_steps"] == r["skipped_steps"] == 0
    assert s["step_time_breakdown_s"].keys() == r["step_time_breakdown_s"].keys()  # data wait, checkpoint: tallied
    assert s["checkpoint"]["saved_steps"] == r["checkpoint"]["saved_steps"]
    assert len(s["checkpoint"]["save_s"]) == len(r["checkpoint"]["save_s"]) == 8
    assert s["samples_per_s"] * s["step_time_s"] == pytest.approx(32.0)  # 24 steps of 32 samples over their time
    assert s["timesteps_per_s"] == pytest.approx(s["samples_per_s"] * 16)  # tokens: seq_len 16 a sample
