"""`stride repro` checks the recorded run's files before it re-runs anything (audit 14, L1 and L10).

A summary.json whose `checkpoint.extended_from` was ["x"] was a ValueError traceback, [-3] blamed the config key
`train.steps`, and a `final_train_loss` of "abc" or null a traceback after the whole re-run had trained and written
`<run>-repro`. An env.json that was a link to /dev/zero was "env.json not found". Each is now one line naming the
file and the field, exit status 2, and nothing is re-run.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from stride.cli.main import main
from stride.config import load_config
from stride.train.trainer import Trainer

TINY = ["data.n_assets=4", "data.n_steps=1024", "data.seq_len=16", "train.batch_size=32", "train.steps=6",
        "train.val_every=0", "metrics.progress=false", "train.threads=1", "optim.warmup_steps=2"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("rec") / "orig"
    Trainer(config=load_config(overrides=TINY), out=run).fit()
    return run


def _copy(recorded: Path, tmp_path: Path, **fields) -> Path:
    run = Path(shutil.copytree(recorded, tmp_path / "run"))
    s = json.loads((run / "summary.json").read_text())
    s.update(fields)
    (run / "summary.json").write_text(json.dumps(s))
    return run


@pytest.mark.parametrize(("fields", "why"), [
    ({"checkpoint": {"extended_from": ["x"]}}, 'checkpoint.extended_from = ["x"] is not a list of increasing step'),
    ({"checkpoint": {"extended_from": [-3]}}, "checkpoint.extended_from = [-3] is not a list of increasing step"),
    ({"checkpoint": {"extended_from": [4, 2]}}, "checkpoint.extended_from = [4, 2] is not a list of increasing"),
    ({"checkpoint": {"extended_from": [6]}}, "checkpoint.extended_from = [6] does not end below the config's "
                                             "train.steps = 6"),
    ({"checkpoint": [1]}, "checkpoint = [1] is not a table"),
    ({"final_train_loss": "abc"}, 'final_train_loss = "abc" is not a finite number'),
    ({"final_train_loss": None}, "final_train_loss = null is not a finite number"),
    ({"params_sha256": 5}, "params_sha256 = 5 is not text"),
    ({"inputs_from": "caller"}, 'inputs_from = "caller" is not a table'),
])
def test_a_damaged_summary_is_refused_before_anything_is_re_run(recorded: Path, tmp_path: Path, fields: dict,
                                                                 why: str, capsys: pytest.CaptureFixture[str]) -> None:
    run = _copy(recorded, tmp_path, **fields)
    assert main(["repro", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"stride repro: {run / 'summary.json'}: {why}"), err
    assert not (tmp_path / "run-repro").exists()  # nothing was re-run


@pytest.mark.parametrize(("name", "what"), [("env.json", "run environment file"), ("summary.json", "run summary"),
                                            ("config.toml", "run config")])
def test_a_run_file_that_is_a_device_is_named_as_one(recorded: Path, tmp_path: Path, name: str, what: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    run = _copy(recorded, tmp_path)
    (run / name).unlink()
    (run / name).symlink_to("/dev/zero")
    assert main(["repro", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"stride repro: {what} {run / name} is a character device, not a regular file", err
    assert not (tmp_path / "run-repro").exists()


def test_python_callers_of_reproduce_get_the_checks_too(recorded: Path, tmp_path: Path) -> None:
    """The checks are `reproduce`'s, not only the command line's: a damaged summary raises RunFolderError at once."""
    from stride.launch.repro import RunFolderError, reproduce

    run = _copy(recorded, tmp_path, final_train_loss="abc")
    with pytest.raises(RunFolderError, match=r'summary.json: final_train_loss = "abc" is not a finite number'):
        reproduce(run)
    assert not (tmp_path / "run-repro").exists()  # nothing was re-run


def test_environment_differences_are_printed_with_their_control_characters_escaped(
        recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """env.json is input (audit 14): its values reached the terminal raw (an ESC clears the screen)."""
    run = _copy(recorded, tmp_path)
    env = json.loads((run / "env.json").read_text())
    env["hostname"] = "h\x1b[2J"
    (run / "env.json").write_text(json.dumps(env))
    main(["repro", str(run)])
    out = capsys.readouterr().out
    assert "  hostname: h\\x1b[2J -> " in out and "\x1b" not in out, out
