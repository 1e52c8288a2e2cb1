"""`stride plan calibrate` checks what it reads from a run's files (audit 14, L2).

`step_time_s: "fast"` was `TypeError: unsupported operand type(s) for -: 'float' and 'str'`, `step_time_breakdown_s:
[1, 2]` an `AttributeError: 'list' object has no attribute 'get'`, while `stride report` refused the same file in one
line. Each field calibration reads is now checked first, and a wrong one is one line naming the file and the key;
a summary.json that is a link to /dev/zero is named as a character device.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stride.cli.main import main
from stride.config import config_to_toml, load_config
from stride.config.errors import ConfigError
from stride.perfmodel.calibrate import run_inputs

GOOD = {"step_time_s": 0.01, "world_size": 1, "device": "cpu", "step_time_breakdown_s": {"forward": 0.004}}


def _run(tmp_path: Path, **fields) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    (d / "config.toml").write_text(config_to_toml(load_config(overrides=["model.name=mlp", "model.size=tiny",
                                                                          "data.seq_len=8", "data.n_steps=1024"])))
    (d / "summary.json").write_text(json.dumps({**GOOD, **fields}))
    return d


@pytest.mark.parametrize(("fields", "why"), [
    ({"step_time_s": "fast"}, 'summary.json: step_time_s = "fast" is not a finite number >= 0'),
    ({"step_time_breakdown_s": [1, 2]}, "summary.json: step_time_breakdown_s = [1, 2] is not a table of finite "
                                        "numbers >= 0"),
    ({"step_time_breakdown_s": {"checkpoint": "x"}},
     'summary.json: step_time_breakdown_s = {"checkpoint": "x"} is not a table'),
    ({"samples_per_s": -3}, "summary.json: samples_per_s = -3 is not a finite number >= 0"),
    ({"world_size": "8"}, 'summary.json: world_size = "8" is not a process count >= 1'),
    ({"device": 5}, "summary.json: device = 5 is not text"),
])
def test_a_damaged_summary_is_one_line_naming_file_and_key(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           fields: dict, why: str) -> None:
    d = _run(tmp_path, **fields)
    with pytest.raises(ConfigError) as err:
        run_inputs(d)
    assert str(err.value).startswith(f"{d}/{why}") and str(err.value).endswith(": edited or damaged"), str(err.value)
    assert main(["plan", "calibrate", str(d)]) == 2
    out = capsys.readouterr().err.strip()
    assert len(out.splitlines()) == 1 and f"{d}/{why}" in out and "Traceback" not in out, out


def test_rank0_and_env_fields_are_checked_too(tmp_path: Path) -> None:
    d = _run(tmp_path)
    (d / "rank0.json").write_text(json.dumps({"median_step_time_s": [0.1]}))
    with pytest.raises(ConfigError, match=r"rank0.json: median_step_time_s = \[0.1\] is not a finite number >= 0"):
        run_inputs(d)
    (d / "rank0.json").unlink()
    (d / "env.json").write_text(json.dumps({"torch_threads": "two"}))
    with pytest.raises(ConfigError, match=r'env.json: torch_threads = "two" is not a thread count >= 1'):
        run_inputs(d)
    (d / "env.json").write_text("[]")
    with pytest.raises(ConfigError, match=r"env.json: holds a JSON list, not the object stride writes"):
        run_inputs(d)


def test_a_summary_that_is_a_device_is_named_as_one(tmp_path: Path) -> None:
    d = _run(tmp_path)
    (d / "summary.json").unlink()
    (d / "summary.json").symlink_to("/dev/zero")
    with pytest.raises(ConfigError, match=rf"^run file {d / 'summary.json'} is a character device, not a regular"):
        run_inputs(d)


def test_a_run_whose_summary_says_the_host_was_busy_is_named(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The run's own contention note reaches calibrate's warnings (stderr and the JSON), naming the run (first-contact
    audit of 2026-12-06: only a general "check that the host was not busy" went out)."""
    note = "the host was busy: 0.84 threads waited for a core on average"
    d = _run(tmp_path, contention_note=note, run_queue_waiting_threads=0.84)
    assert run_inputs(d).contention == note
    assert main(["plan", "calibrate", str(d), "--hardware", "epyc-9654"]) == 0
    cap = capsys.readouterr()
    said = [w for w in json.loads(cap.out)["warnings"] if "busy host" in w]
    assert len(said) == 1 and str(d) in said[0] and note in said[0] and said[0] in cap.err
    quiet = tmp_path / "quiet"
    quiet.mkdir()
    for f in ("config.toml", "summary.json"):
        (quiet / f).write_text((d / f).read_text())
    (quiet / "summary.json").write_text(json.dumps(GOOD))
    assert run_inputs(quiet).contention is None
