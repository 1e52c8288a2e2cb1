"""A switched-on tracker whose library is missing is one config error before anything is built (outside audit 12:
a traceback mid-run for tensorboard and prometheus, with no install hint); a missing config file says where it was
looked for."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from stride.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("key", "module", "extra"), [("tensorboard", "tensorboard", "observe"),
                                                      ("prometheus", "prometheus_client", "observe"),
                                                      ("mlflow", "mlflow", "mlflow"), ("wandb", "wandb", "wandb")])
def test_a_missing_tracker_library_is_one_line_and_nothing_written(tmp_path, monkeypatch, capsys, key, module,
                                                                   extra) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a))
    out = tmp_path / "run"
    code = main(["train", str(ROOT / "configs" / "quickstart.toml"), "--set", f"metrics.{key}=true",
                 "--set", "train.steps=2", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert f"`metrics.{key}` = true needs the" in err[0] and f"pip install -e '.[{extra}]'" in err[0]
    assert not out.exists()


def test_a_missing_config_says_where_it_was_looked_for_and_a_near_name(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["train", "configs/quickstrat.toml"]) == 2
    err = capsys.readouterr().err
    assert f"looked for {ROOT / 'configs' / 'quickstrat.toml'}" in err and "did you mean configs/quickstart.toml" in err


def test_ctrl_c_without_checkpoints_says_where_it_stopped_and_what_is_kept(tmp_path, monkeypatch, capsys) -> None:
    from stride.train.trainer import Trainer

    real = Trainer._validate

    def interrupt_at_step_3(self, tally):  # Ctrl-C arrives during step 3's bookkeeping
        if self.step == 3:
            raise KeyboardInterrupt
        return real(self, tally)

    monkeypatch.setattr(Trainer, "_validate", interrupt_at_step_3)
    code = main(["train", str(ROOT / "configs" / "quickstart.toml"), "--set", "train.steps=50", "--set",
                 "data.n_steps=1024", "--set", "checkpoint.enabled=false", "--no-progress",
                 "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 130
    assert "stride train: stopped (interrupted) after step 3 of 50; no checkpoint (checkpoint.enabled = false)" in err
    assert "--set checkpoint.enabled=true makes a Ctrl-C resumable" in err


def test_a_missing_config_suggests_no_unrelated_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Names are compared without their shared `.toml`: `none.toml` beside `newhw.toml` suggested it (first-contact
    audit of 2026-12-06); a near miss of the stem still gets its suggestion."""
    (tmp_path / "newhw.toml").write_text("")
    (tmp_path / "quickstart.toml").write_text("")
    for name, said in (("none.toml", None), ("quickstat.toml", "quickstart.toml")):
        assert main(["train", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert ("did you mean" in err) is (said is not None) and (said is None or said in err), err
