"""`stride repro` on a run whose config.toml was edited after it finished (audit: `sed -i 's/^lr = .*/lr = 0.003/'`).

Before: a warning that blamed TOML's missing null or a schema change, then a re-run of the edited config reported
as "MISMATCH ... 5.80e-02", exit 1. Now: refused, exit 2, nothing re-run; the keys that differ from the config the
run recorded (the run folder's config.recorded.toml or a checkpoint's meta.json, checked against summary.json's
config_hash) are named where the run kept one, else the file is said to have been edited after the run.
`--allow-edited-config` re-runs it on purpose. (A review found a run without checkpoints could not name the keys:
nothing else recorded the resolved config; the run folder now keeps config.recorded.toml.)
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from stride.cli.main import main
from stride.config import load_config
from stride.launch.repro import EditedConfigError, reproduce
from stride.metrics.run_dir import RECORDED_CONFIG, RUN_FILES
from stride.train.trainer import Trainer

TINY = ["data.n_assets=4", "data.n_steps=1024", "data.seq_len=16", "train.batch_size=32", "train.steps=4",
        "train.val_every=0", "metrics.progress=false", "train.threads=1", "optim.warmup_steps=2", "optim.lr=0.001"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """A finished tiny run with a final checkpoint (its meta.json keeps the resolved config)."""
    run = tmp_path_factory.mktemp("rec") / "orig"
    Trainer(config=load_config(overrides=[*TINY, "checkpoint.enabled=true"]), out=run).fit()
    return run


def _edited(recorded: Path, tmp_path: Path, *, keep_checkpoints: bool, keep_copy: bool = True) -> Path:
    run = Path(shutil.copytree(recorded, tmp_path / "run"))
    if not keep_checkpoints:
        shutil.rmtree(run / "checkpoints")
    if not keep_copy:  # a run folder written before the copy was kept
        (run / RECORDED_CONFIG).unlink()
    cfg = run / "config.toml"
    text, n = re.subn(r"(?m)^lr = .*$", "lr = 0.003", cfg.read_text())
    assert n == 1
    cfg.write_text(text)
    return run


def test_an_edited_config_names_the_changed_key_and_nothing_is_re_run(recorded: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    run = _edited(recorded, tmp_path, keep_checkpoints=True)
    assert main(["repro", str(run), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "was edited after the run" in err and "optim.lr 0.001 -> 0.003" in err, err
    assert "--set optim.lr=0.003" in err and "--allow-edited-config" in err
    assert "None-valued" not in err and "MISMATCH" not in err
    assert not (tmp_path / "r").exists()


def test_a_run_without_checkpoints_names_the_changed_key_from_its_recorded_copy(
        recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _edited(recorded, tmp_path, keep_checkpoints=False)
    assert (run / RECORDED_CONFIG).read_text() == (recorded / "config.toml").read_text()  # written with config.toml
    assert RECORDED_CONFIG in RUN_FILES  # and cleared with it by --overwrite
    assert main(["repro", str(run), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "was edited after the run" in err and f"recorded ({RECORDED_CONFIG}, config_hash" in err, err
    assert "optim.lr 0.001 -> 0.003" in err and "--set optim.lr=0.003" in err
    assert not (tmp_path / "r").exists()


def test_without_a_recorded_config_the_edit_is_the_primary_reason(recorded: Path, tmp_path: Path) -> None:
    run = _edited(recorded, tmp_path, keep_checkpoints=False, keep_copy=False)
    with pytest.raises(EditedConfigError, match=r"config.toml no longer hashes to the config_hash the run recorded "
                                                 r"\(\w+\): it was edited after the run") as exc:
        reproduce(run, tmp_path / "r")
    assert exc.value.exit_code == 2 and not (tmp_path / "r").exists()
    assert f"kept no copy of its resolved config ({RECORDED_CONFIG}, a checkpoint's meta.json)" in str(exc.value)


@pytest.mark.parametrize("copy", ["edited", "not toml", "fifo"])
def test_a_recorded_copy_that_does_not_hash_to_the_record_is_not_taken_for_it(recorded: Path, tmp_path: Path,
                                                                             copy: str) -> None:
    run = _edited(recorded, tmp_path, keep_checkpoints=False)
    kept = run / RECORDED_CONFIG
    if copy == "edited":  # edited alike: it no longer hashes to summary.json's config_hash
        kept.write_text((run / "config.toml").read_text())
    elif copy == "not toml":
        kept.write_text("[optim\n")
    else:
        kept.unlink()
        os.mkfifo(kept)
    with pytest.raises(EditedConfigError, match="no longer hashes .* edited after the run") as exc:
        reproduce(run, tmp_path / "r")
    assert "optim.lr" not in str(exc.value) and not (tmp_path / "r").exists()


def test_a_meta_json_that_does_not_hash_to_the_record_is_not_taken_for_it(recorded: Path, tmp_path: Path) -> None:
    run = _edited(recorded, tmp_path, keep_checkpoints=True, keep_copy=False)
    (meta,) = run.glob("checkpoints/step_*/meta.json")
    m = json.loads(meta.read_text())
    m["config"]["optim"]["lr"] = 0.003  # edited too: it no longer hashes to summary.json's config_hash
    meta.write_text(json.dumps(m))
    with pytest.raises(EditedConfigError, match="edited after the run") as exc:
        reproduce(run, tmp_path / "r")
    assert "optim.lr" not in str(exc.value)


def test_allow_edited_config_re_runs_it_and_says_it_is_no_reproduction(recorded: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    run = _edited(recorded, tmp_path, keep_checkpoints=False)
    rc = main(["repro", str(run), "--out", str(tmp_path / "r"), "--allow-edited-config"])
    out = capsys.readouterr().out
    assert rc == 1 and "config.toml was edited after the run" in out and "not a reproduction" in out
    assert "likely cause: config.toml was edited after the run" in out


def test_an_unedited_config_with_a_set_override_is_re_run(recorded: Path, tmp_path: Path) -> None:
    """--set is a change asked for: the recorded file still hashes as recorded and is re-run with it."""
    run = Path(shutil.copytree(recorded, tmp_path / "run"))
    shutil.rmtree(run / "checkpoints")
    rep = reproduce(run, tmp_path / "r", tolerance=1.0, overrides=["metrics.progress=true"])
    assert rep.config_hash_match and rep.matches
