"""A sweep directory's files are checked before they are used (audit 10, F4 and F7).

F4: with sweep.json deleted, a sweep of another base config (or --set) took the old point files as finished (ids
hash only the grid values) and ranked 20-step points beside 40-step ones. Now a point file carries the plan's
config_hash for its point and one of another config is refused, before sweep.json is written.
F7: a packs.jsonl line or a sweep.json that parses as JSON but has the wrong shape gave a traceback (KeyError,
AttributeError, TypeError); now one line naming the file (and line), exit status 2.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from stride.cli.main import main

GRID = ["--grid", "optim.lr=1e-3,3e-3", "--grid", "train.seed=0,1", "--pack", "2"]


@pytest.fixture(scope="module")
def finished(config, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sw") / "s"
    assert main(["sweep", str(config), *GRID, "--out", str(out)]) == 0
    return out


@pytest.fixture
def copy(finished, tmp_path) -> Path:
    return Path(shutil.copytree(finished, tmp_path / "s"))


def test_point_files_of_another_config_are_refused_when_sweep_json_is_gone(config, copy, capsys) -> None:
    (copy / "sweep.json").unlink()  # the way around "holds another sweep", to extend the grid
    before = {p.name: p.read_bytes() for p in (copy / "points").iterdir()}
    rc = main(["sweep", str(config), "--set", "train.steps=6", "--grid", "optim.lr=1e-3,3e-3,1e-2",
               "--grid", "train.seed=0,1", "--pack", "2", "--out", str(copy)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2, err  # was 0: "trained 2 point(s)", the 4-step points ranked beside the 6-step ones
    assert err[-1].startswith("stride sweep: ") and "trained with another config than this sweep's point" in err[-1]
    assert "config_hash" in err[-1] and "use another --out" in err[-1]
    assert {p.name: p.read_bytes() for p in (copy / "points").iterdir()} == before  # nothing trained
    assert not (copy / "sweep.json").exists()  # the refused plan is not written over the directory


def test_the_same_config_resumes_without_sweep_json(config, copy, capsys) -> None:
    (copy / "sweep.json").unlink()
    assert main(["sweep", str(config), *GRID, "--out", str(copy)]) == 0
    assert "4 of 4 points already finished" in capsys.readouterr().err


@pytest.mark.parametrize(("line", "why"), [
    ("{}", "index is null, not a whole number >= 0"),
    ("1", "holds a JSON int, not a pack's record"),
    ('{"index": 9, "ids": [], "size": 0, "wall_s": "1", "time": 1}', 'wall_s is "1", not a finite number >= 0'),
    ('{"index": 9, "ids": ["a"], "size": 1, "wall_s": 1, "time": 1, "error": 3}', "error is 3, not text"),
])
def test_a_pack_record_of_the_wrong_shape_is_one_line(config, copy, capsys, line, why) -> None:
    log = copy / "packs.jsonl"
    n = len(log.read_text().splitlines()) + 1
    with open(log, "a") as f:
        f.write(line + "\n")
    rc = main(["sweep", str(config), *GRID, "--out", str(copy)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"stride sweep: {log} line {n}: {why} (stride writes each pack's record whole")


def test_a_line_cut_by_a_kill_is_still_skipped(config, copy, capsys) -> None:
    with open(copy / "packs.jsonl", "a") as f:
        f.write('{"index": 7, "ids": ["ab')  # what a kill mid-write leaves
    assert main(["sweep", str(config), *GRID, "--out", str(copy)]) == 0


def test_what_the_sweep_writes_is_a_pack_record(finished) -> None:
    from stride.sweep.runner import pack_record_problem

    for line in (finished / "packs.jsonl").read_text().splitlines():
        assert pack_record_problem(json.loads(line)) is None


@pytest.mark.parametrize(("text", "why"), [
    ("[]", "a JSON list, not an object"),
    ('{"schema": "stride.sweep", "points": 3}', "its points are not a list of tables"),
    ('{"schema": "stride.sweep", "points": [1]}', "its points are not a list of tables"),
])
def test_a_sweep_json_of_the_wrong_shape_is_one_line(config, copy, capsys, text, why) -> None:
    (copy / "sweep.json").write_text(text)
    rc = main(["sweep", str(config), *GRID, "--out", str(copy)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0] == f"stride sweep: {copy / 'sweep.json'}: not a stride sweep file ({why}); use another --out"


def _rename_to_old(path: Path, value=None) -> None:
    obj = json.loads(path.read_text())
    h = obj.pop("plan_config_hash")
    obj["config_hash"] = h if value is None else value
    path.write_text(json.dumps(obj))


def test_the_plan_hash_has_its_own_name_and_old_files_are_still_read(config, copy, capsys) -> None:
    """Audit #7: a point file's top-level `config_hash` (the plan's config) differed from its summary's (the config
    the run trained with, progress off): two hashes, one name. The plan's is `plan_config_hash` now; a file written
    before, with it as `config_hash`, is still checked against the plan."""
    plan = {p["id"]: p["config_hash"] for p in json.loads((copy / "sweep.json").read_text())["points"]}
    paths = sorted((copy / "points").glob("*.json"))
    for path in paths:
        obj = json.loads(path.read_text())
        assert obj["plan_config_hash"] == plan[obj["id"]] and "config_hash" not in obj
    _rename_to_old(paths[0])
    assert main(["sweep", str(config), *GRID, "--out", str(copy)]) == 0
    capsys.readouterr()
    _rename_to_old(paths[1], "0" * 16)
    assert main(["sweep", str(config), *GRID, "--out", str(copy)]) == 2
    assert "trained with another config" in capsys.readouterr().err
