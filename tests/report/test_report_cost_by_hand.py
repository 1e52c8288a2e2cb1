"""`stride report`'s cost of a real `stride train` run against a hand computation (outside review of the report).

cost per million samples = USD an hour for the devices the run used / 3600 / the run's samples a second (every
rank's) x 1e6; cost per run to target = USD an hour x (seconds to the target on the training clock + seconds that
restarts trained again) / 3600. Two defects: a GPU run was priced at every GPU its host's env.json lists, not the
GPUs it ran on (a one-process run on an 8-GPU node cost 8x; 16 ranks on two such nodes cost half), and the seconds a
resumed run trained twice (`lost_time_s`, off the training clock) were left out of the cost to target. A resumed
quick-start run here: 14.185 s to its target on the clock, 0.406 s lost to a kill, at 0.10 USD an hour: 0.000405 USD,
not 0.000394.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from stride.cli.main import main
from stride.report.inputs import resolve
from stride.report.recommend import recommend

TINY = ("[train]\nsteps = 8\nbatch_size = 16\nval_every = 4\ntarget_val_loss = 100.0\nthreads = 1\n"
        "[data]\nn_assets = 2\nn_steps = 512\nseq_len = 8\nhorizons = [1]\n[metrics]\nprogress = false\n")
PRICES = {"cpu": 0.10, "H100": 3.50}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real `stride train` run folder (one process on this machine's CPU), reaching its target."""
    base = tmp_path_factory.mktemp("cost")
    cfg = base / "tiny.toml"
    cfg.write_text(TINY)
    assert main(["train", str(cfg), "--out", str(base / "run"), "--no-progress"]) == 0
    return base / "run"


def _copy(run: Path, to: Path, summary: dict | None = None, env: dict | None = None) -> Path:
    shutil.copytree(run, to)
    for name, edit in (("summary.json", summary), ("env.json", env)):
        if edit:
            data = json.loads((to / name).read_text())
            (to / name).write_text(json.dumps({**data, **edit}))
    return to


def _summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


def test_cost_of_a_cpu_run_is_the_hand_computation(run: Path) -> None:
    s = _summary(run)
    assert s["world_size"] == 1 and s["time_to_target_s"] > 0 and s["samples_per_s"] > 0
    (r,) = recommend(resolve(run)[0], PRICES, speeds=None)
    assert r["usd_per_million_samples"] == pytest.approx(0.10 / 3600 / s["samples_per_s"] * 1e6, rel=1e-12)
    assert r["usd_per_run_to_target"] == pytest.approx(0.10 * s["time_to_target_s"] / 3600, rel=1e-12)
    assert r["cost_unit"] == "samples" and r.get("devices_priced") is None  # the CPU host, priced whole


def test_a_one_process_gpu_run_on_an_8_gpu_node_is_priced_at_one_gpu(run: Path, tmp_path: Path) -> None:
    gpu = _copy(run, tmp_path / "gpu", env={"gpus": ["NVIDIA H100 80GB HBM3"] * 8})
    s = _summary(gpu)
    (r,) = recommend(resolve(gpu)[0], PRICES, speeds=None)
    # one H100's 3.50 USD an hour, not 8 x 3.50 = 28.00
    assert r["usd_per_million_samples"] == pytest.approx(3.50 / 3600 / s["samples_per_s"] * 1e6, rel=1e-12)
    assert r["devices_priced"] == 1 and r["usd_per_hour"] == 3.50
    assert main(["report", str(gpu), "--prices", str(_prices(tmp_path))]) == 0
    want = f"Cost: {3.50 / 3600 / s['samples_per_s'] * 1e6:.4f} USD per million samples (H100 x 1 GPU)"
    assert want in (gpu / "summary.md").read_text()


def test_a_run_over_two_nodes_is_priced_at_all_its_gpus(run: Path, tmp_path: Path) -> None:
    """16 ranks on two 8-GPU nodes: env.json lists rank 0's 8; the samples a second are all 16 ranks'."""
    two = _copy(run, tmp_path / "two", summary={"world_size": 16}, env={"gpus": ["NVIDIA H100 80GB HBM3"] * 8})
    (r,) = recommend(resolve(two)[0], PRICES, speeds=None)
    assert r["usd_per_million_samples"] == pytest.approx(16 * 3.50 / 3600 / _summary(two)["samples_per_s"] * 1e6)
    assert r["devices_priced"] == 16 and r["usd_per_hour"] == pytest.approx(56.0)


def test_the_cost_to_target_counts_the_seconds_restarts_trained_again(run: Path, tmp_path: Path) -> None:
    """A resumed run's summary.json: time_to_target_s on the training clock, lost_time_s off it (both paid for)."""
    resumed = _copy(run, tmp_path / "resumed", summary={"time_to_target_s": 14.185262602004514,
                                                        "lost_time_s": 0.4058394970052177})
    (r,) = recommend(resolve(resumed)[0], PRICES, speeds=None)
    assert r["usd_per_run_to_target"] == pytest.approx(0.10 * (14.185262602004514 + 0.4058394970052177) / 3600)
    assert r["usd_per_run_to_target"] == pytest.approx(0.000405308, rel=1e-6)
    assert main(["report", str(resumed), "--prices", str(_prices(tmp_path))]) == 0
    assert "USD per run to target (with 0.4 s that restarts trained again)" in (resumed / "summary.md").read_text()


def test_a_zero_price_is_said_not_counted_rather_than_missing(run: Path, tmp_path: Path) -> None:
    (r,) = recommend(resolve(run)[0], {"cpu": 0.0}, speeds=None)
    assert r["usd_per_million_samples"] == 0.0 and r["usd_per_hour"] == 0.0  # it was None: "no price"
    free = _copy(run, tmp_path / "free")
    p = tmp_path / "free.toml"
    p.write_text("[prices]\ncpu = 0\n")
    assert main(["report", str(free), "--prices", str(p)]) == 0
    md = (free / "summary.md").read_text()
    assert "Cost: not counted (the price table gives cpu 0 USD an hour)" in md and "no price" not in md


def _prices(tmp_path: Path) -> Path:
    p = tmp_path / "prices.toml"
    p.write_text("[prices]\ncpu = 0.10\nH100 = 3.50\n")
    return p
