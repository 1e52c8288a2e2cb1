"""`stride sweep` end to end: the sweep directory, the report, kill and resume, export into `stride train`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from sweep_fixtures import mlp_toml

from stride.bench.results import load_results
from stride.checkpoint import CheckpointCallback
from stride.cli.main import main
from stride.config import load_config
from stride.metrics.hashing import params_sha256
from stride.sweep.store import SweepStore
from stride.train.callbacks import Callback
from stride.train.trainer import Trainer

REPO = Path(__file__).resolve().parents[2]
CONFIG = mlp_toml(30, 15, "skip_steps = 2").replace("[train]", "[optim]\nwarmup_steps = 5\n[train]")
GRID = ["--grid", "optim.lr=1e-3,3e-3", "--grid", "train.seed=0..2"]
RESULT_COLUMNS = ["point", "optim.lr", "train.seed", "status", "steps", "final_train_loss", "final_val_loss",
                  "params_sha256"]


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cfg") / "sweep.toml"
    path.write_text(CONFIG)
    return path


@pytest.fixture(scope="module")
def finished(config, tmp_path_factory) -> Path:
    """A finished sweep: 2 learning rates x 3 seeds in packs of 3."""
    out = tmp_path_factory.mktemp("sweep") / "s"
    assert main(["sweep", str(config), *GRID, "--pack", "3", "--out", str(out)]) == 0
    return out


def test_the_sweep_directory_and_report(finished):
    plan = json.loads((finished / "sweep.json").read_text())
    assert len(plan["points"]) == 6
    packs = [json.loads(line) for line in (finished / "packs.jsonl").read_text().splitlines()]
    assert [p["size"] for p in packs] == [3, 3] and not any(p["solo"] for p in packs)
    table = pq.read_table(finished / "table.parquet").to_pylist()
    assert [r["point"] for r in table] == [p["id"] for p in plan["points"]]
    assert all(r["status"] == "done" and r["steps"] == 30 and r["final_val_loss"] > 0 for r in table)
    results = load_results(finished / "results.json")  # the bench schema, validated
    assert len(results["workloads"]) == 6 and results["suite"] == "sweep"
    pairs = results["sweep"]["pairs"]
    assert len(pairs) == 1 and pairs[0]["n_a"] == pairs[0]["n_b"] == 3  # two learning rates, three seeds each
    assert set(pairs[0]) >= {"diff", "t", "df", "p", "p_holm", "ci95", "ci95_method", "significant"}
    lo, hi = pairs[0]["ci95"]  # 3 seeds a side: Welch's t interval, excluding 0 exactly when the raw p < 0.05
    assert pairs[0]["ci95_method"] == "welch_t" and lo < pairs[0]["diff"] < hi
    assert (lo > 0 or hi < 0) == (pairs[0]["p"] < 0.05)
    assert results["sweep"]["cost"]["train_speedup"] is not None
    html = (finished / "report.html").read_text()
    assert html.count("<svg") == 1 and "optim.lr" in html  # one swept key besides the seed
    summary = (finished / "summary.md").read_text()
    assert "Pairs of configurations" in summary and "ci95_method welch_t (fewer than 25 seeds on a side)" in summary
    assert "| welch_t |" in summary and "ci95_method" in html


def test_running_again_trains_nothing(config, finished, capsys):
    before = (finished / "packs.jsonl").read_text()
    assert main(["sweep", str(config), *GRID, "--pack", "3", "--out", str(finished)]) == 0
    assert "6 of 6 points already finished" in capsys.readouterr().err
    assert (finished / "packs.jsonl").read_text() == before


def test_another_grid_in_the_same_directory_is_refused(config, finished, capsys):
    assert main(["sweep", str(config), "--grid", "train.seed=0..3", "--out", str(finished)]) == 2
    err = capsys.readouterr().err.strip()
    assert "holds another sweep" in err and len(err.splitlines()) == 1


def _table(out: Path) -> list[dict]:
    return pq.read_table(out / "table.parquet").select(RESULT_COLUMNS).to_pylist()


@pytest.mark.slow
def test_a_killed_sweep_resumes_and_its_table_equals_an_uninterrupted_one(config, finished, tmp_path):
    """SIGKILL while the second pack trains; the rerun trains only that pack; the table equals the one of
    the uninterrupted sweep (`finished`, same machine: bitwise)."""
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "stride", "sweep", str(config), *GRID, "--pack", "3", "--out", str(out),
           "--set", "train.steps=30"]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    store = SweepStore(out)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if store.points_dir.exists() and len(list(store.points_dir.glob("*.json"))) >= 3:
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done = {p.stem for p in store.points_dir.glob("*.json")}
    assert 3 <= len(done) < 6, f"the kill came at {len(done)} finished points; the test needs it inside the second pack"
    log = out / "packs.jsonl"
    logged = len(log.read_text().splitlines()) if log.exists() else 0
    assert main(["sweep", str(config), *GRID, "--pack", "3", "--out", str(out), "--set", "train.steps=30"]) == 0
    rerun = [json.loads(line) for line in log.read_text().splitlines()[logged:]]
    plan = json.loads((out / "sweep.json").read_text())
    assert sorted(i for p in rerun for i in p["ids"]) == sorted(p["id"] for p in plan["points"] if p["id"] not in done)
    assert _table(out) == _table(finished)


def test_export_a_point_and_stride_train_resumes_it(config, finished, tmp_path, capsys):
    plan = json.loads((finished / "sweep.json").read_text())
    point = plan["points"][4]
    run = tmp_path / "run"
    assert main(["sweep", str(config), *GRID, "--pack", "3", "--out", str(finished), "--export", point["id"],
                 "--export-to", str(run)]) == 0
    err = capsys.readouterr().err
    assert f"point {point['id']}" in err and "finished at step 30; train it further with:" in err
    assert "--set train.steps=60" in err  # not the bare resume line, which would train nothing
    assert (run / "checkpoints" / "step_00000030" / "manifest.json").is_file()
    sets = [f"{k}={json.dumps(v)}" for k, v in point["values"].items()]
    # the point finished its 30 steps: the printed command says so and trains and writes nothing (issue 16, item 1)
    assert main(["train", str(config), *sum((["--set", s] for s in sets), []), "--set", "checkpoint.enabled=true",
                 "--out", str(run), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "finished at step 30" in err and "as `stride sweep --export` writes one" in err
    assert not (run / "summary.json").exists()
    # raising train.steps extends it from the exported state: the parameters at the start are the pack's, exactly
    seen = {}

    class AtStart(Callback):
        def on_fit_start(self, trainer) -> None:
            seen["step"], seen["params"] = trainer.step, params_sha256(trainer.model)

    cfg = load_config(config, overrides=[*sets, "checkpoint.enabled=true", "train.steps=32", "metrics.progress=false"])
    summary = Trainer(config=cfg, out=run, callbacks=[CheckpointCallback(), AtStart()]).fit().summary
    packed = json.loads((finished / "points" / f"{point['id']}.json").read_text())["summary"]
    assert summary["checkpoint"]["resumed_from"] == "step_00000030" and summary["steps"] == 32
    assert seen == {"step": 30, "params": packed["params_sha256"]}  # the exported parameters, exactly


def test_unpackable_points_run_alone_under_auto_and_are_refused_under_pack_n(config, tmp_path, capsys):
    out = tmp_path / "solo"
    args = ["sweep", str(config), "--grid", "train.seed=0,1", "--set", "optim.name=adafactor", "--set",
            "train.steps=4", "--out", str(out)]
    assert main([*args, "--pack", "2"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # progress lines, then the error: one line
    assert last.startswith("stride sweep: config error: `optim.name` = 'adafactor': packed training supports adamw")
    assert main([*args, "--pack", "auto"]) == 0
    err = capsys.readouterr().err
    assert "every point trained alone (pack size 1)" in err and "packed against" not in err  # no packing claimed
    table = pq.read_table(out / "table.parquet").to_pylist()
    assert [r["mode"] for r in table] == ["solo", "solo"]
    assert all((out / "runs" / r["point"] / "summary.json").is_file() for r in table)


def test_an_unreachable_ray_cluster_is_one_line(config, tmp_path, capsys):
    pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[ray]')")
    rc = main(["sweep", str(config), "--grid", "train.seed=0,1", "--pack", "2", "--backend", "ray",
               "--ray-address", "127.0.0.1:9", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and err[-1].startswith("stride sweep: the Ray cluster at 127.0.0.1:9 is not reachable"), err


def test_chunk_sets_the_models_a_packed_step_trains_at_once(config, tmp_path, capsys):
    out = tmp_path / "chunked"
    args = ["sweep", str(config), "--grid", "train.seed=0..3", "--set", "train.steps=4", "--pack", "4"]
    assert main([*args, "--chunk", "0", "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "stride sweep: config error: --chunk '0': auto or a positive integer")
    assert main([*args, "--chunk", "3", "--out", str(out)]) == 0
    # --chunk 3 on a pack of 4: chunk_bounds makes 2 nearly equal chunks of 2, which the line and pack_chunk say
    # (they said "3 models a step" and 3: audit 10, F11)
    assert "in 1 pack(s) of up to 4, 2 chunks of 2 models a step (--pack 4)" in capsys.readouterr().err
    chunked = _summaries(out)
    assert [s["pack_chunk"] for s in chunked] == [2] * 4 and [s["pack_size"] for s in chunked] == [4] * 4
    assert main([*args, "--out", str(tmp_path / "auto")]) == 0  # auto: the CPU default, all 4 at once
    whole = _summaries(tmp_path / "auto")
    assert [s["pack_chunk"] for s in whole] == [4] * 4
    for a, b in zip(chunked, whole, strict=True):  # the same models trained (tests/sweep/test_pack_chunks.py: fp64)
        assert a["final_train_loss"] == pytest.approx(b["final_train_loss"], rel=1e-5)


def _summaries(out: Path) -> list[dict]:
    """Each finished point's summary, in point-id order."""
    return [json.loads(p.read_text())["summary"] for p in sorted((out / "points").glob("*.json"))]


def test_one_seed_per_configuration_makes_no_claim_about_seed_noise(config, tmp_path, capsys):
    """It printed "1.6569 +- 0.0000 (sd over 1 seed)" and "0 of 1 configuration pairs differ beyond seed noise",
    and summary.md a zero-width interval [0.0791, 0.0791] beside a diff of "-"."""
    out = tmp_path / "one_seed"
    assert main(["sweep", str(config), "--grid", "optim.lr=1e-3,3e-3", "--set", "train.steps=4", "--set",
                 "train.val_every=4", "--pack", "2", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    best = [line for line in err.splitlines() if "optim.lr=" in line and "point " not in line]
    assert len(best) == 2 and all("(1 seed: seed noise unknown; add seeds with --grid train.seed=0..2 in another "
                                  "--out (a sweep folder holds one grid))" in line for line in best), best
    assert "+-" not in err and "sd over" not in err and "differ beyond seed noise" not in err
    assert "no claim on which configurations differ: seed noise unknown with fewer than 2 seeds" in err
    summary = (out / "summary.md").read_text()
    assert "no claim on which configurations differ" in summary and "significant:" not in summary
    row = next(line for line in summary.splitlines() if line.startswith('| optim.lr='))
    # n_a, n_b 1; diverged_a, diverged_b 0; no [x, x] interval
    assert row.endswith("| 1 | 1 | 0 | 0 | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a |"), row
    results = load_results(out / "results.json")
    (pair,) = results["sweep"]["pairs"]
    assert pair["ci95"] is None and pair["significant"] is None and pair["p"] is None  # null: no test, no claim
    assert pair["ci95_method"] is None
    assert all(w["throughput"]["cv"] is None for w in results["workloads"])  # one measurement: no spread, not 0


def test_export_of_a_point_not_in_the_grid_is_refused_before_training(config, tmp_path, capsys):
    """It trained the whole sweep, then said `--export 'nonexist': no such point` (exit 2)."""
    out = tmp_path / "never"
    for which in ("nonexist", "2"):  # an id not in the grid, an index past its end
        rc = main(["sweep", str(config), "--grid", "train.seed=0..1", "--set", "train.steps=4", "--out", str(out),
                   "--export", which, "--export-to", str(tmp_path / "exp")])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1, err  # the refusal alone: no "2 points ..." line, no training
        assert err[0].startswith(f"stride sweep: config error: --export {which!r}: no such point in this grid")
        assert "(train.seed=0)" in err[0] and "an index 0..1" in err[0]
        assert not out.exists() and not (tmp_path / "exp").exists()


def test_a_sweep_from_an_earlier_data_split_is_not_resumed_into(config, finished, tmp_path, capsys):
    """Points validated on the split of an earlier stride (before the embargo fix of 2026-12-05: plans without
    `split_version`) do not mix with new ones: the rerun is refused, naming why, and trains nothing."""
    import shutil

    out = tmp_path / "old"
    shutil.copytree(finished, out)
    plan = json.loads((out / "sweep.json").read_text())
    assert plan.pop("split_version") == 2
    (out / "sweep.json").write_text(json.dumps(plan))
    capsys.readouterr()
    assert main(["sweep", str(config), *GRID, "--pack", "3", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "6 finished point(s) were validated on the data split of an earlier stride (split version 1, now 2" in err
