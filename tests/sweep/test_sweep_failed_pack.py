"""A pack that raises (not a config error) is recorded as failed, and the rest of the sweep goes on.

Before, a local pack whose training raised ended the whole sweep with a traceback (the packs after it never ran, no
report), while with `--backend ray` the other packs went on and the failed pack's finished points were lost. Now
both backends record each failed point (DIR/failed/<id>.json, one line each on the console, the pack's traceback in
DIR/failed/pack-<k>.txt), run every other pack, write the report saying how many failed, end with one line and exit
status 1; the same command again trains only the failed and unfinished points.

The failure is real: a `module:factory` model whose forward raises at its 3rd call, only where its parameters are
a pack's (batched: the packed trainer's vmap), or in every run (then already where the lone model is timed, before
any pack). The surviving points must equal, bit for bit, a sweep without the failing model (same process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sweep_fixtures import mlp_toml

from stride.cli.main import main

FACTORY = '''
from pathlib import Path

import torch
from torch import nn


class Boom(nn.Module):
    """A linear model whose forward raises at call `at`: in a pack only (`packed`), or in every run (`any`)."""

    def __init__(self, n_features, seq_len, n_horizons, mode, at):
        super().__init__()
        self.lin = nn.Linear(n_features * seq_len, n_horizons)
        self.calls, self.mode, self.at = 0, mode, at

    def forward(self, x):
        self.calls += 1
        packed = torch._C._functorch.is_batchedtensor(self.lin.weight)
        if self.at and self.calls >= self.at and (self.mode == "any" or packed):
            raise RuntimeError(f"injected failure at forward {self.calls}")
        return self.lin(x.flatten(-2))


def build(n_features, seq_len, n_horizons):
    flag = Path(__file__).with_name("fail_at")
    mode, at = flag.read_text().split() if flag.exists() else ("none", "0")
    return Boom(n_features, seq_len, n_horizons, mode, int(at))
'''

LOSSY = '''
from torch import nn


class Lossy(nn.Module):
    """A model that brings its own loss: packed training refuses it (a ConfigError) when its pack builds it."""

    def __init__(self, n_features, seq_len, n_horizons):
        super().__init__()
        self.lin = nn.Linear(n_features * seq_len, n_horizons)
        self.loss = nn.MSELoss()

    def forward(self, x):
        return self.lin(x.flatten(-2))


def build(n_features, seq_len, n_horizons):
    return Lossy(n_features, seq_len, n_horizons)
'''

KEEP = ("status", "steps", "final_train_loss", "final_val_loss", "params_sha256")


@pytest.fixture
def boom(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """(model.name of the failing factory, its flag file); a module name of its own per test."""
    name = f"boom_{tmp_path.name.replace('-', '_')}"
    folder = tmp_path / "factory"
    folder.mkdir()
    (folder / f"{name}.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(folder))
    yield f"{name}:build", folder / "fail_at"
    sys.modules.pop(name, None)


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(mlp_toml(6, 3))
    return path


def by_seed(out: Path, model: str = "mlp") -> dict[int, dict]:
    """The finished points of `model`, by seed: what the comparison reads of their summaries."""
    found = {}
    for f in (out / "points").glob("*.json"):
        r = json.loads(f.read_text())
        if r["values"].get("model.name", "mlp") == model:
            found[r["values"]["train.seed"]] = {k: r["summary"].get(k) for k in KEEP}
    return found


def test_a_pack_that_raises_is_recorded_and_the_sweep_goes_on(cfg, boom, tmp_path, capsys) -> None:
    name, flag = boom
    flag.write_text("packed 3")
    out = tmp_path / "s"
    argv = ["sweep", str(cfg), "--grid", f"model.name={name},mlp", "--grid", "train.seed=0,1", "--pack", "2",
            "--out", str(out)]
    capsys.readouterr()
    assert main(argv) == 1  # the failing class's pack comes first: before, its error ended the sweep there
    err = capsys.readouterr().err
    plan = {p["id"]: p["values"] for p in json.loads((out / "sweep.json").read_text())["points"]}
    failing = sorted(i for i, v in plan.items() if v["model.name"] == name)
    for pid in failing:
        rec = json.loads((out / "failed" / f"{pid}.json").read_text())
        assert rec["error"] == "RuntimeError: injected failure at forward 3"
        assert f"point {pid} " in err and "FAILED in pack" in err
        assert "injected failure" in Path(rec["traceback"]).read_text()
        assert not (out / "points" / f"{pid}.json").exists()
    assert err.rstrip().splitlines()[-1].startswith("stride sweep: 2 of 4 point(s) FAILED, in 1 pack(s) (pack 0: "
                                                    "RuntimeError: injected failure at forward 3)")
    section = json.loads((out / "results.json").read_text())["sweep"]
    assert sorted(f["id"] for f in section["failed"]) == failing and section["finished"] == 2
    assert "2 point(s) FAILED" in (out / "summary.md").read_text()
    packs = [json.loads(line) for line in (out / "packs.jsonl").read_text().splitlines()]
    assert [p["error"] for p in packs] == ["RuntimeError: injected failure at forward 3", None]

    ref = tmp_path / "ref"  # the same sweep without the failing model: the survivors are its points, bit for bit
    assert main(["sweep", str(cfg), "--grid", "train.seed=0,1", "--pack", "2", "--out", str(ref)]) == 0
    assert by_seed(out) == by_seed(ref) and len(by_seed(ref)) == 2

    kept = {f.name: f.read_bytes() for f in (out / "points").glob("*")}
    flag.unlink()  # the fault is gone: the same command retries only the failed points
    capsys.readouterr()
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "resuming: 2 of 4 points already finished" in err and "trained 2 point(s)" in err
    assert all((out / "points" / n).read_bytes() == b for n, b in kept.items())  # not trained again
    assert not (out / "failed").exists()  # the records and the pack's traceback: nothing failed is left
    assert json.loads((out / "results.json").read_text())["sweep"]["failed"] == []


@pytest.mark.parametrize("at, doing", [("1", "sizing its packs (memory model)"), ("3", "timing the lone model")])
def test_a_model_that_raises_before_its_packs_fails_its_points_only(cfg, boom, tmp_path, capsys, at, doing) -> None:
    """The memory model runs the model on one batch, and the lone model's timing (the speed-up's one-by-one side)
    trains it, both before any pack: its error there ended the sweep before any pack ran."""
    name, flag = boom
    flag.write_text(f"any {at}")
    out = tmp_path / "s"
    capsys.readouterr()
    assert main(["sweep", str(cfg), "--grid", f"model.name={name},mlp", "--grid", "train.seed=0,1", "--pack", "2",
                 "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"2 point(s) of `{name}`: FAILED while {doing}: RuntimeError: injected failure at forward {at}" in err
    assert len(list((out / "failed").glob("*.json"))) == 2 and len(by_seed(out)) == 2
    assert "2 of 4 point(s) FAILED" in err.rstrip().splitlines()[-1]


@pytest.fixture(scope="module")
def ray_factory(tmp_path_factory: pytest.TempPathFactory, ray_auth_token: str) -> Iterator[tuple[str, Path]]:
    """A local Ray cluster (2 CPUs, as tests/sweep/test_sweep_ray.py's) whose workers import the failing factory:
    its folder is on PYTHONPATH when the cluster starts. (model.name, flag file)."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[ray]')")
    import ray

    folder = tmp_path_factory.mktemp("rayfactory")
    (folder / "boom_on_ray.py").write_text(FACTORY)
    (folder / "lossy_on_ray.py").write_text(LOSSY)
    temp = Path(tempfile.mkdtemp(prefix="stride-ray-"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
        mp.setenv("RAY_AUTH_TOKEN", ray_auth_token)
        mp.delenv("RAY_ADDRESS", raising=False)
        mp.setenv("PYTHONPATH", os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]))
        mp.syspath_prepend(str(folder))
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 2**20, _temp_dir=str(temp))
        try:
            yield "boom_on_ray:build", folder / "fail_at"
        finally:
            ray.shutdown()
            subprocess.run(["rm", "-rf", str(temp)], check=False)
            sys.modules.pop("boom_on_ray", None)
            sys.modules.pop("lossy_on_ray", None)


def _same_form(text: str, out: Path) -> list[str]:
    """The sweep's lines about failures, with its folder's path taken out."""
    return [line.replace(str(out), "DIR") for line in text.splitlines() if "FAILED" in line]


@pytest.mark.slow
def test_ray_records_a_failed_pack_as_the_local_backend_does(ray_factory, cfg, tmp_path, capsys) -> None:
    """Both backends: the same failure records, packs.jsonl errors, lines and exit status; the same survivors. Before,
    Ray went on and ended with "1 pack(s) failed on Ray (... RuntimeError: injected failure at forward 3)", exit 1,
    while the local backend stopped at the failing pack with a traceback."""
    name, flag = ray_factory
    flag.write_text("packed 3")
    runs = {}
    for backend in ("local", "ray"):
        out = tmp_path / backend
        capsys.readouterr()
        code = main(["sweep", str(cfg), "--grid", f"model.name={name},mlp", "--grid", "train.seed=0,1", "--pack", "2",
                     "--backend", backend, "--out", str(out)])
        err = capsys.readouterr().err
        failed = {f.name: {k: v for k, v in json.loads(f.read_text()).items() if k not in ("time", "traceback")}
                  for f in (out / "failed").glob("*.json")}
        lines = (out / "packs.jsonl").read_text().splitlines()
        packs = sorted((r["index"], r["error"]) for r in map(json.loads, lines))  # Ray's tasks end in any order
        runs[backend] = (code, failed, packs, _same_form(err, out), by_seed(out))
    assert runs["local"] == runs["ray"]
    code, failed, packs, lines, survivors = runs["ray"]
    assert code == 1 and len(failed) == 2 and len(survivors) == 2 and lines[-1].startswith("stride sweep: 2 of 4")
    assert "injected failure" in (tmp_path / "ray" / "failed" / "pack-0.txt").read_text()


def test_a_sweep_whose_every_point_failed_still_reports_them(cfg, boom, tmp_path, capsys) -> None:
    """No point finished: the report files still list the failures (they were not written at all)."""
    name, flag = boom
    flag.write_text("any 3")
    out = tmp_path / "s"
    capsys.readouterr()
    assert main(["sweep", str(cfg), "--grid", f"model.name={name}", "--grid", "train.seed=0,1", "--pack", "2",
                 "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.rstrip().splitlines()[-1].startswith("stride sweep: 2 of 2 point(s) FAILED")
    assert "no pairs to compare" not in err
    assert "2 point(s) FAILED" in (out / "summary.md").read_text() and "FAILED" in (out / "report.html").read_text()
    assert len(json.loads((out / "results.json").read_text())["sweep"]["failed"]) == 2


@pytest.mark.slow
def test_a_config_error_in_a_pack_stops_the_sweep_on_both_backends(ray_factory, cfg, tmp_path, capsys) -> None:
    """A refusal of the config found only when a pack builds its models (a model with its own loss under --pack 2)
    stops the sweep with its line and exit status 2 on both backends. Before, on Ray it was a failed pack (exit 1)."""
    ends = {}
    for backend in ("local", "ray"):
        capsys.readouterr()
        code = main(["sweep", str(cfg), "--grid", "model.name=mlp,lossy_on_ray:build", "--grid", "train.seed=0,1",
                     "--pack", "2", "--backend", backend, "--out", str(tmp_path / backend)])
        ends[backend] = (code, capsys.readouterr().err.rstrip().splitlines()[-1])
    assert ends["local"] == ends["ray"]
    assert ends["ray"][0] == 2 and "brings its own loss" in ends["ray"][1], ends


def test_an_exported_point_that_finished_is_exported_beside_a_failed_pack(cfg, boom, tmp_path, capsys) -> None:
    """`--export` of a point that finished: another pack's failure does not skip the export (exit status still 1)."""
    name, flag = boom
    flag.write_text("packed 3")
    out, run = tmp_path / "s", tmp_path / "exported"
    capsys.readouterr()
    assert main(["sweep", str(cfg), "--grid", f"model.name={name},mlp", "--grid", "train.seed=0,1", "--pack", "2",
                 "--export", "2", "--export-to", str(run), "--out", str(out)]) == 1  # point 2: mlp, seed 0
    err = capsys.readouterr().err
    assert "exported to" in err and list((run / "checkpoints").glob("step_*"))
    assert err.rstrip().splitlines()[-1].startswith("stride sweep: 2 of 4 point(s) FAILED")
