"""`stride sweep --export` of a point whose state file is crafted, damaged or missing: one line, exit 2.

Before: a `points/<id>.state.pt` whose data.pkl REDUCEs os.system was not run (torch's weights-only loader
refused it) but the user got torch's traceback ending in "Re-running torch.load with weights_only set to False
will likely succeed", advice to run it; a truncated file gave "PytorchStreamReader failed reading zip archive";
a deleted one said "(not trained yet?)" of a point the sweep counts as finished and never trains again. And
all of it only after the sweep had trained its other points, though --help says the export is checked first.
"""

from __future__ import annotations

import io
import os
import pickle
import shutil
import zipfile
from pathlib import Path

import pytest
import torch

from stride.cli.main import main
from stride.sweep.store import SweepStateError, SweepStore

GRID = ["--grid", "optim.lr=1e-3,2e-3", "--pack", "2"]


class _Run:
    """Pickles as a call of os.system (what a crafted state file holds)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def crafted(path: Path, marker: Path) -> None:
    """A real torch zip whose data.pkl is replaced by a pickle calling os.system."""
    buf = io.BytesIO()
    torch.save({"model": {}, "optim": {}, "step": 1, "data": None}, buf)
    src = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    with zipfile.ZipFile(path, "w") as out:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename.endswith("data.pkl"):
                data = pickle.dumps({"model": _Run(marker)}, protocol=2)
            out.writestr(info, data)


@pytest.fixture(scope="module")
def finished(config, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sweep") / "s"
    assert main(["sweep", str(config), *GRID, "--out", str(out)]) == 0
    return out


@pytest.fixture
def sweep(finished, tmp_path) -> Path:
    return Path(shutil.copytree(finished, tmp_path / "s"))


def point_ids(sweep: Path) -> list[str]:
    return sorted(p.name.split(".")[0] for p in (sweep / "points").glob("*.state.pt"))


def export(config: Path, sweep: Path, pid: str, to: Path, capsys) -> tuple[int, list[str]]:
    capsys.readouterr()
    rc = main(["sweep", str(config), *GRID, "--out", str(sweep), "--export", pid, "--export-to", str(to)])
    return rc, capsys.readouterr().err.strip().splitlines()


def test_a_crafted_state_file_is_refused_in_one_line_without_torchs_advice(config, sweep, tmp_path, capsys):
    pid, marker = point_ids(sweep)[0], tmp_path / "ran"
    crafted(sweep / "points" / f"{pid}.state.pt", marker)
    rc, err = export(config, sweep, pid, tmp_path / "to", capsys)
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"stride sweep: {sweep}/points/{pid}.state.pt is damaged or not a stride state file")
    assert "posix.system" in err[0] and "nothing in it was run" in err[0]
    assert "weights_only" not in err[0] and "Re-running" not in err[0] and "Traceback" not in err[0]
    assert not marker.exists() and not (tmp_path / "to").exists()


def test_a_truncated_state_file_is_one_line(config, sweep, tmp_path, capsys):
    pid = point_ids(sweep)[0]
    path = sweep / "points" / f"{pid}.state.pt"
    path.write_bytes(path.read_bytes()[:3000])
    rc, err = export(config, sweep, pid, tmp_path / "to", capsys)
    assert rc == 2 and len(err) == 1, err
    assert "is damaged or not a stride state file (not a complete zip archive" in err[0]
    assert "PytorchStreamReader" not in err[0]
    assert f"delete {sweep}/points/{pid}.json and {pid}.state.pt and run the same sweep command again" in err[0]


def test_a_missing_state_file_says_so_and_how_to_train_the_point_again(config, sweep, tmp_path, capsys):
    pid = point_ids(sweep)[0]
    (sweep / "points" / f"{pid}.state.pt").unlink()
    rc, err = export(config, sweep, pid, tmp_path / "to", capsys)
    assert rc == 2 and len(err) == 1, err
    assert f"{pid}.state.pt is missing, though the point finished" in err[0] and "not trained yet" not in err[0]
    # what it says to do trains the point again, and then it exports
    (sweep / "points" / f"{pid}.json").unlink()
    rc, err = export(config, sweep, pid, tmp_path / "to", capsys)
    assert rc == 0 and "trained 1 point(s)" in "\n".join(err)
    assert (tmp_path / "to" / "checkpoints" / "step_00000004" / "manifest.json").is_file()


def test_the_state_file_is_checked_before_the_sweep_trains(config, sweep, tmp_path, capsys):
    done, todo = point_ids(sweep)
    (sweep / "points" / f"{done}.state.pt").write_bytes(b"not a zip")
    (sweep / "points" / f"{todo}.json").unlink()  # an unfinished point: the rerun would train it
    rc, err = export(config, sweep, done, tmp_path / "to", capsys)
    assert rc == 2 and len(err) == 1, err
    assert not (sweep / "points" / f"{todo}.json").exists()  # not trained


def test_a_state_file_without_a_points_keys_is_refused(sweep):
    store = SweepStore(sweep)
    pid = point_ids(sweep)[0]
    torch.save([torch.zeros(2)], store.state_path(pid))
    with pytest.raises(SweepStateError, match=r"is not a stride state file \(no model, optim, step, data\)"):
        store.load_state(pid)
