"""What a resume checks of a checkpoint's training state and metadata before it applies any (audit 16).

M1: a data position whose `n_windows` is not this run's data passed every check and made the loader raise a
ValueError traceback inside `apply`, after the check, every time the run was restarted; the ordinary case is a
store re-ingested between a run and its resume (the config does not cover its content), where every
checkpoint has the old count. M5: a replay that is not the step resumed without a word (ranks that disagree:
test_checkpoint_rank_positions.py); a forced resume that changed `data.seed` still resumes (review: it was
refused). L1: an unreadable shard entry was reported with torch's six-line weights_only text. L3: a forged
`world_size` in meta.json and the manifest was reported as a layout change.
"""

from __future__ import annotations

import datetime
import io
import json
import pickle
from pathlib import Path

import pytest
import torch
from ckpt_helpers import Crash, CrashAt, fit
from test_checkpoint_rng_state import _data, _rewrite

from stride.checkpoint import ConfigMismatchError
from stride.checkpoint.folder import CheckpointFolder
from stride.checkpoint.manifest import write_manifest
from stride.train.trainer import Trainer


def _crashed_run(out: Path) -> None:
    with pytest.raises(Crash):
        fit(out, callbacks=[CrashAt(7)])  # saves at 3 and 6


def _reseal(folder: Path, step: int) -> None:
    old = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").unlink()
    write_manifest(folder, step, {k: old[k] for k in ("config_hash", "world_size", "lineage")})


def test_a_position_of_other_data_on_one_checkpoint_is_skipped_not_a_traceback(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    _crashed_run(out)
    _rewrite(out / "checkpoints" / "step_00000006", 6, _data(n_windows=5))
    s = fit(out)
    err = capsys.readouterr().err
    assert s["checkpoint"]["resumed_from"] == "step_00000003", err
    assert "could not load step_00000006 (rank 0's data position has n_windows 5, this run's data " in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("recorded", [True, False], ids=["meta-records-the-data", "older-checkpoint"])
def test_data_that_changed_since_the_checkpoints_is_one_refusal_not_a_loop_of_fallbacks(
        tmp_path: Path, capsys, recorded: bool) -> None:
    """Every checkpoint has the old count: one refusal naming the change (force_resume lets the config through,
    as a store re-ingested in place does: the config does not cover its content)."""
    out = tmp_path / "run"
    _crashed_run(out)
    for step in (3, 6):
        folder = out / "checkpoints" / f"step_{step:08d}"
        meta = json.loads((folder / "meta.json").read_text())
        if recorded:
            assert meta["data"]["batch_size"] == 32 and meta["data"]["n_windows"] > 0
        else:  # a checkpoint of a stride before meta.json recorded the data: the positions tell
            meta.pop("data", None)
            (folder / "meta.json").write_text(json.dumps(meta))
            _reseal(folder, step)
    capsys.readouterr()
    with pytest.raises(ConfigMismatchError) as exc:
        fit(out, "data.n_steps=2048", "checkpoint.force_resume=true")
    msg = str(exc.value)
    assert msg.startswith(f"checkpoint {out / 'checkpoints' / 'step_00000006'} was taken on data of "), msg
    assert "the data changed since (a store re-ingested or edited?)" in msg and "\n" not in msg
    assert "could not load" not in capsys.readouterr().err  # no fallback to step 3 first


def test_an_exception_applying_the_training_state_is_a_fallback(tmp_path: Path, capsys, monkeypatch) -> None:
    out = tmp_path / "run"
    _crashed_run(out)
    real, calls = Trainer.resume_data, []

    def fails_once(self: Trainer, position) -> None:
        calls.append(position)
        if len(calls) == 1:
            raise RuntimeError("the loader refused it\nsecond line")
        real(self, position)

    monkeypatch.setattr(Trainer, "resume_data", fails_once)
    s = fit(out)
    err = capsys.readouterr().err
    assert s["checkpoint"]["resumed_from"] == "step_00000003", err
    assert ("could not load step_00000006 (its training state could not be applied (on rank 0: RuntimeError: the "
            "loader refused it\\nsecond line)); falling back to step_00000003") in err, err


@pytest.mark.parametrize(("edit", "reason"), [
    (_data(batches=2), "rank 0's data position replays 2 batches, not the 6 steps taken"),
])
def test_a_position_of_another_step_is_skipped(tmp_path: Path, capsys, edit, reason: str) -> None:
    out = tmp_path / "run"
    _crashed_run(out)
    _rewrite(out / "checkpoints" / "step_00000006", 6, edit)
    s = fit(out)
    err = capsys.readouterr().err
    assert s["checkpoint"]["resumed_from"] == "step_00000003", err
    assert f"could not load step_00000006 ({reason}); falling back to step_00000003" in err, err


def test_a_shard_entry_torch_refuses_is_one_line_of_stride_never_weights_only_advice(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    _crashed_run(out)
    folder = out / "checkpoints" / "step_00000006"
    md = pickle.loads((folder / ".metadata").read_bytes())  # the test's own file
    index = next(k for k in md.storage_data if k.fqn == "train")
    info = md.storage_data[index]
    buf = io.BytesIO()
    torch.save(datetime.date(2020, 1, 1), buf)  # a global torch's weights-only unpickler refuses
    shard = folder / info.relative_path
    info.offset, info.length = shard.stat().st_size, len(buf.getvalue())
    with open(shard, "ab") as f:
        f.write(buf.getvalue())
    (folder / ".metadata").write_bytes(pickle.dumps(md))
    _reseal(folder, 6)
    s = fit(out)
    err = capsys.readouterr().err
    assert s["checkpoint"]["resumed_from"] == "step_00000003", err
    assert (f"could not load step_00000006 (a shard entry in {info.relative_path} is not what DCP wrote (an edited "
            "or mismatched .metadata, or other bytes in the shard)); falling back to step_00000003") in err, err
    assert "weights_only" not in err and "Weights only" not in err


def test_why_keeps_torchs_weights_only_text_out(tmp_path: Path) -> None:
    text = ("Weights only load failed. This file can still be loaded, to do so you have two options\n"
            "(1) In PyTorch 2.6, we changed the default value of the `weights_only` argument ...\n"
            "Re-running `torch.load` with `weights_only` set to `False` will likely succeed")
    why = CheckpointFolder(tmp_path)._why(RuntimeError("load failed").with_traceback(None))
    assert why == "RuntimeError: load failed"
    exc = RuntimeError("read failed")
    exc.__cause__ = pickle.UnpicklingError(text)
    assert CheckpointFolder(tmp_path)._why(exc) == \
        "a shard entry is not what DCP wrote (an edited or mismatched .metadata, or other bytes)"


def test_a_forged_world_size_is_not_reported_as_a_layout_change(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    _crashed_run(out)
    folder = out / "checkpoints" / "step_00000006"
    for name in ("meta.json", "manifest.json"):
        d = json.loads((folder / name).read_text())
        d["world_size"] = 4
        (folder / name).write_text(json.dumps(d))
    _reseal(folder, 6)  # keeps the manifest's (forged) world_size
    s = fit(out)
    err = capsys.readouterr().err
    assert s["checkpoint"]["resumed_from"] == "step_00000003", err
    assert "skipped step_00000006: meta.json says world size 4, but its shards were written by 1 rank" in err, err
    assert s["checkpoint"]["resume_changes"] == [] and "world size: 4" not in err


def test_a_forced_resume_with_another_data_seed_continues_the_checkpoints_stream(tmp_path: Path, capsys) -> None:
    """force_resume accepts a changed `data.seed`; the loader restores the checkpoint's seed, so the resume and the
    resumes after it continue that stream (the seed was compared with this run's config and every checkpoint
    refused, down to "no older valid checkpoint is left")."""
    out = tmp_path / "run"
    with pytest.raises(Crash):
        fit(out, "data.seed=3", "train.seed=5", callbacks=[CrashAt(7)])  # saves at 3 and 6
    s = fit(out, "data.seed=4", "train.seed=5", "checkpoint.force_resume=true")
    err = capsys.readouterr().err
    assert s["checkpoint"]["resumed_from"] == "step_00000006" and "could not load" not in err, err
