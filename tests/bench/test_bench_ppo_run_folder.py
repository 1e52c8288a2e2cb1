"""The PPO workload keeps a run folder as the supervised ones do (it kept nothing but its results entry, whose
run_dir was empty): config.toml, env.json, a metrics.jsonl line per update and summary.json."""

from __future__ import annotations

import json
from pathlib import Path

from stride.bench.runner import run_workload
from stride.bench.workloads import Workload


def test_a_ppo_workload_writes_its_run_folder(tmp_path: Path) -> None:
    w = Workload("ppo_tiny", 1, "PPO, 8 envs, 8-step rollouts", ("metrics.progress=false",),
                 throughput_unit="env steps/s", kind="ppo",
                 params=(("n_envs", 8), ("episode_len", 8), ("updates", 3), ("rollout_steps", 8), ("width", 8)))
    entry = run_workload(w, "cpu", tmp_path)
    run = tmp_path / "ppo_tiny"
    assert entry["run_dir"] == str(run)
    assert {p.name for p in run.iterdir()} >= {"config.toml", "env.json", "metrics.jsonl", "summary.json"}
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2, 3] and lines[-1]["env_steps"] == 3 * 8 * 8
    summary = json.loads((run / "summary.json").read_text())
    assert summary["kind"] == "ppo" and summary["steps"] == 3 and summary["params_sha256"] == entry["params_sha256"]
    assert run_workload(w, "cpu", None)["run_dir"] is None  # no --out: nothing written
