"""What an offline W&B run shows after a rollback in the loop (steps 8-9 non-finite: back from 9 to the checkpoint
at 6).

W&B's steps only increase: its history keeps the rolled-back values of steps 7-9 and the redone ones are not sent (W&B
would drop each with a warning). The rollback is said on the run: the summary key `stride/rolled_back` ("9>6") and,
since session 37, the tag `rolled-back`, which the project's run table shows and filters on (before: the summary key
alone, on the run's own page). Read back from the offline run file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "checkpoint"))
from ckpt_helpers import ckpt_config, inf_loss_at  # noqa: E402
from test_trackers import _wandb_records  # noqa: E402

from stride.train.trainer import Trainer  # noqa: E402


def _loss_fn(bad: tuple[int, ...]):  # noqa: ANN202
    return inf_loss_at(bad)


def test_a_rollback_is_marked_on_the_wandb_run(tmp_path: Path) -> None:
    pytest.importorskip("wandb", reason="the `wandb` extra is not installed (pip install -e '.[wandb]')")
    import wandb

    out = tmp_path / "run"
    cfg = ckpt_config("checkpoint.nan_rollback_after=2", "metrics.wandb=true", "train.val_every=4")
    try:
        s = Trainer(config=cfg, out=out, loss_fn=_loss_fn((8, 9))).fit().summary
    finally:
        torch.use_deterministic_algorithms(False)
    wandb.teardown()  # the offline file is complete once W&B's service closed the run's stream
    assert s["checkpoint"]["rollback_events"][0]["from_step"] == 9
    records = _wandb_records(next(Path(s["wandb_run_dir"]).glob("run-*.wandb")))
    tags, summary, history = set(), {}, {}
    for rec in records:
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            tags |= set(rec.run.tags)
        elif kind == "summary":
            summary.update({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.summary.update})
        elif kind == "history":
            items = {i.key or ".".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item}
            step = items.pop("_step")
            assert step not in history, f"step {step} sent twice"
            history[step] = items
    assert "rolled-back" in tags
    assert summary["stride/rolled_back"] == "9>6"
    assert sorted(history) == list(range(1, 25))
    # steps 8-9 hold the rolled-back values (non-finite losses, the validation of the rolled-back step 8) ...
    assert history[8]["loss"] == history[9]["loss"] == float("inf")
    (event,) = [json.loads(line) for line in (out / "rollbacks.jsonl").read_text().splitlines()]
    dropped_val = [r["val_loss"] for r in event["records"] if r["step"] == 8 and "val_loss" in r]
    assert history[8]["val_loss"] == dropped_val[0]
    # ... while metrics.jsonl holds the redone ones; from step 10 on W&B and metrics.jsonl agree
    kept = {r["step"]: r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "loss" in r}
    assert kept[8]["loss"] is not None and kept[8]["loss"] != history[8]["loss"]
    assert all(history[st]["loss"] == kept[st]["loss"] for st in range(10, 25))
