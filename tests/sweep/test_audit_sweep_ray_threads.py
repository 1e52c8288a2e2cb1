"""On Ray the speed-up's one-by-one side runs at the threads the packs run at (outside audit of `stride sweep`, D4).

A Ray task's torch threads are `--cpus-per-pack` where `train.threads` is unset, and run_ray set that on the packs'
configs only after the probe and the lone model's rate had been measured in the driver at torch's default threads
(every core). `train.threads` is a packing-class key, so the classes' rates, keyed by the configs before, matched no
point after: every packed point's `one_by_one_s` was null and the sweep printed no speed-up. A fake `ray` module
stands in for the cluster, as in test_sweep_ray_timing.py.
"""

from __future__ import annotations

import json
import sys

from sweep_fixtures import mlp_toml
from test_sweep_ray_timing import _fake_ray

import stride.launch.ray_train
import stride.sweep.runner
from stride.cli.main import main


def test_the_lone_rate_and_the_packs_run_at_the_cpus_per_pack_threads(tmp_path, monkeypatch) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(mlp_toml(4, 4).replace("threads = 1\n", ""))  # train.threads unset: the task's CPUs decide
    monkeypatch.setitem(sys.modules, "ray", _fake_ray([]))
    monkeypatch.setattr(stride.launch.ray_train, "init_ray", lambda ray, address: False)
    seen: dict[str, list] = {"solo": [], "pack": []}
    real_solo, real_job = stride.sweep.runner.measure_solo, stride.sweep.runner.ray_job

    def solo(c):
        seen["solo"].append(c.train.threads)
        return real_solo(c)

    def job(j):
        seen["pack"].extend(c.train.threads for c in j.configs)
        return real_job(j)

    monkeypatch.setattr(stride.sweep.runner, "measure_solo", solo)
    monkeypatch.setattr(stride.sweep.runner, "ray_job", job)
    out = tmp_path / "s"
    assert main(["sweep", str(cfg), "--grid", "train.seed=0..3", "--pack", "4", "--backend", "ray",
                 "--cpus-per-pack", "1", "--out", str(out)]) == 0
    assert seen == {"solo": [1], "pack": [1, 1, 1, 1]}  # the lone rate was taken at None: torch's default
    points = [json.loads(p.read_text()) for p in (out / "points").glob("*.json")]
    assert len(points) == 4 and all(p["one_by_one_s"] is not None for p in points)  # were all null
    c = json.loads((out / "results.json").read_text())["sweep"]["cost"]
    assert c["points_without_estimate"] == 0 and c["train_speedup"] is not None
