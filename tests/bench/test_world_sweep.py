"""World-size sweep: efficiency arithmetic by hand, the results.json v2 scaling section, the report's
scaling plots, core pinning, and one small real sweep (1 and 2 ranks under torchrun)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest

from stride.bench.pinning import ENV, core_plan
from stride.bench.results import ResultsError, load_results, make_results, validate_results
from stride.bench.scaling import (
    Point,
    efficiency,
    parse_list,
    plan_points,
    point_record,
    strong_efficiency,
    weak_efficiency,
)
from stride.cli.main import main
from stride.config.errors import ConfigError


def _summary(step: float, fwd: float, comm: float | None = None) -> dict:
    return {"step_time_s": step, "exposed_comm_fraction": comm, "comm_exposed_s": None, "comm_hidden_s": None,
            "step_time_breakdown_s": {"forward": fwd, "backward": step - fwd}}


def test_efficiency_by_hand() -> None:
    # One rank: 1000 samples/s. Weak, 2 ranks at 1600 samples/s in all: 800 per rank -> 0.8.
    assert weak_efficiency(800.0, 1000.0) == pytest.approx(0.8)
    # Strong, 4 ranks at 3000 samples/s: 3000 / (4 x 1000) = 0.75 (speed-up 3).
    assert strong_efficiency(3000.0, 4, 1000.0) == pytest.approx(0.75)
    assert efficiency(Point("ddp", "weak", 2, 128), 1600.0, 1000.0) == pytest.approx(0.8)
    assert efficiency(Point("fsdp", "strong", 4, 64), 3000.0, 1000.0) == pytest.approx(0.75)
    assert efficiency(Point("single", "baseline", 1, 64), 900.0, 1000.0) == 1.0


def test_plan_points_batches_and_errors() -> None:
    pts = plan_points(64, [1, 2, 4], ["ddp", "fsdp"], ["weak", "strong"])
    assert [p.label for p in pts] == ["n1", "ddp-weak-n2", "ddp-strong-n2", "fsdp-weak-n2", "fsdp-strong-n2",
                                      "ddp-weak-n4", "ddp-strong-n4", "fsdp-weak-n4", "fsdp-strong-n4"]
    weak4 = next(p for p in pts if p.label == "ddp-weak-n4")
    strong4 = next(p for p in pts if p.label == "fsdp-strong-n4")
    assert (weak4.per_rank_batch, weak4.global_batch) == (64, 256)
    assert (strong4.per_rank_batch, strong4.global_batch) == (16, 64)
    assert weak4.overrides() == ["train.batch_size=256", "parallel.dp_replicate=4"]
    assert strong4.overrides() == ["train.batch_size=64", "parallel.dp_shard=4"]
    assert plan_points(8, [2], ["ddp"], ["weak"])[0].label == "n1"  # the baseline always runs
    with pytest.raises(ConfigError, match="global batch 6 does not split into 4"):
        plan_points(6, [4], ["ddp"], ["strong"])
    with pytest.raises(ConfigError, match="did you mean `fsdp`"):
        plan_points(8, [2], ["fsdb"], ["weak"])
    with pytest.raises(ConfigError, match="not weak or strong"):
        plan_points(8, [2], ["ddp"], ["linear"])
    assert parse_list(["1,2", "4"], "--world-sizes") == ["1", "2", "4"]


def test_point_record_by_hand() -> None:
    base = Point("single", "baseline", 1, 100)
    weak = Point("ddp", "weak", 2, 200)
    strong = Point("ddp", "strong", 2, 100)
    base_t, base_s = [1000.0, 900.0, 1100.0], [_summary(0.1, 0.02)] * 3
    # weak: 2 ranks, global throughput 1500, 1800, 1700 -> median 1700, per rank 850, eff 850/1000
    r = point_record("m", weak, "samples/s", [1500.0, 1800.0, 1700.0],
                     [_summary(0.12, 0.03, 0.1), _summary(0.11, 0.025, 0.2), _summary(0.13, 0.03, 0.3)],
                     base_t, base_s, 100, 2, "m+ddp-weak-n2")
    assert r["efficiency"] == pytest.approx(0.85) and r["speedup"] == pytest.approx(1.7)
    assert r["per_rank_throughput"] == pytest.approx(850.0)
    # paired by round: 1500/2/1000, 1800/2/900, 1700/2/1100
    assert r["efficiency_rounds"] == pytest.approx([0.75, 1.0, 1700 / 2 / 1100])
    assert r["exposed_comm_fraction"] == pytest.approx(0.2)
    # forward per sample: median 0.03 s for 100 samples per rank vs 0.02 s for 100 -> 1.5x
    assert r["forward_time_per_sample_ratio"] == pytest.approx(1.5)
    assert not r["oversubscribed"] and r["ranks_per_core"] == 1.0
    # strong: 2 ranks share the batch of 100 (50 each); forward 0.015 s for 50 samples = 1.5x per sample
    s = point_record("m", strong, "samples/s", [1600.0], [_summary(0.06, 0.015)], base_t, base_s, 100, 1, "x")
    assert s["efficiency"] == pytest.approx(1600 / (2 * 1000)) and s["oversubscribed"]
    assert s["forward_time_per_sample_ratio"] == pytest.approx(1.5)
    assert point_record("m", base, "samples/s", base_t, base_s, base_t, base_s, 100, 2, "m+n1")["efficiency"] == 1.0


def test_core_plan_flags_oversubscription() -> None:
    plan = core_plan(4, cores=(0, 1))
    assert plan.assignment == [0, 1, 0, 1] and plan.oversubscribed and plan.ranks_per_core == 2.0
    assert "OVERSUBSCRIBED" in plan.describe() and plan.env() == {ENV: "0,1,0,1"}
    two = core_plan(2, cores=(0, 1))
    assert not two.oversubscribed and "rank 1 on core 1" in two.describe()
    gpu = core_plan(2, pin=False, cores=(0, 1))
    assert gpu.env() == {} and "not pinned" in gpu.describe()


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no sched_setaffinity on this OS")
def test_pin_from_env_pins_every_thread() -> None:
    cores = sorted(os.sched_getaffinity(0))
    code = ("import threading, os, time\n"
            "t = threading.Thread(target=time.sleep, args=(2,)); t.start()\n"  # a thread that exists before pinning
            "from stride.bench.pinning import pin_from_env\n"
            "core = pin_from_env()\n"
            "tids = os.listdir('/proc/self/task')\n"
            "print(core, sorted({c for tid in tids for c in os.sched_getaffinity(int(tid))}))\n"
            "t.join()")
    env = {**os.environ, ENV: ",".join(map(str, cores)), "LOCAL_RANK": str(len(cores) - 1)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split(maxsplit=1) == [str(cores[-1]), f"[{cores[-1]}]\n"]


def test_runqueue_wait_share_by_hand(tmp_path) -> None:
    from stride.bench.world import runqueue_wait_share

    (tmp_path / "sched-rank0.json").write_text(json.dumps({"cpu_s": 3.0, "runqueue_wait_s": 1.0}))
    (tmp_path / "sched-rank1.json").write_text(json.dumps({"cpu_s": 1.0, "runqueue_wait_s": 1.0}))
    assert runqueue_wait_share(tmp_path, 2) == pytest.approx((0.25 + 0.5) / 2)
    assert runqueue_wait_share(tmp_path, 3) is None  # a rank that did not report: unknown, not zero


def test_worker_error_keeps_the_ranks_error() -> None:
    from stride.bench.world import worker_error

    stderr = "\n".join([
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "stride/data/build.py", line 12, in build_data',
        "[rank0]: ModuleNotFoundError: No module named 'nosuch'",
        "E1202 17:34:50 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1)",
        "Traceback (most recent call last):",
        '  File "<frozen runpy>", line 198, in _run_module_as_main',
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "  error_file: <N/A>",
    ])
    msg = worker_error(stderr)
    assert "No module named 'nosuch'" in msg and "frozen runpy" not in msg and "ChildFailedError" not in msg


def test_rank_command_is_the_train_launcher() -> None:
    from stride.bench.world import rank_command
    from stride.launch.torchrun import torchrun_command

    cmd = rank_command(["-m", "stride.bench.rank_entry", "train", "c.toml"], 2)
    assert cmd[:-4] == torchrun_command(["c.toml"], nproc=2)[:-4]
    assert cmd[-4:] == ["-m", "stride.bench.rank_entry", "train", "c.toml"]


def _point(workload: str, strategy: str, scaling: str, n: int, tput: float, eff: float, comm=None, **kw) -> dict:
    batch = kw.pop("batch", 64)
    return {"workload": workload, "strategy": strategy, "scaling": scaling, "world_size": n,
            "per_rank_batch": batch if scaling != "strong" else batch // n,
            "global_batch": batch * n if scaling == "weak" else batch,
            "throughput": {"unit": "samples/s", "median": tput, "min": tput, "max": tput, "cv": 0.0, "n": 1},
            "speedup": tput / 1000.0, "efficiency": eff, "efficiency_rounds": [eff],
            "exposed_comm_fraction": comm, "forward_time_per_sample_ratio": kw.pop("fwd", 1.0),
            "runqueue_wait_share": kw.pop("wait", 0.05),
            "cores": 2, "ranks_per_core": n / 2, "oversubscribed": n > 2, **kw}


def _scaling() -> dict:
    return {"method": "test", "pinning": {"1": "1 rank on core 0", "2": "2 ranks"}, "cores": [0, 1], "repeats": 1,
            "load_avg_1min": [1.0, 1.0],
            "points": [_point("m", "single", "baseline", 1, 1000.0, 1.0),
                       _point("m", "ddp", "weak", 2, 1800.0, 0.9, 0.05),
                       _point("m", "ddp", "weak", 4, 2000.0, 0.5, 0.3),
                       _point("m", "fsdp", "strong", 2, 1200.0, 0.6, wait=0.4)]}


def _workload(name: str) -> dict:
    return {"name": name, "version": 1, "run_dir": None, "mfu": None, "peak_mem_bytes": 2**20,
            "time_to_target_s": None, "step_time_breakdown_s": {"forward": 0.1, "backward": 0.2},
            "throughput": {"unit": "samples/s", "median": 1000.0, "min": 1000.0, "max": 1000.0, "cv": 0.0}}


def test_schema_v2_scaling_and_v1_reader(tmp_path) -> None:
    res = make_results("world-sweep", {}, [_workload("m+n1")], _scaling())
    assert res["schema_version"] == 2
    v1 = {k: v for k, v in res.items() if k != "scaling"} | {"schema_version": 1}
    (tmp_path / "v1.json").write_text(json.dumps(v1))
    read = load_results(tmp_path / "v1.json")
    assert read["schema_version"] == 2 and "scaling" not in read and read["workloads"] == v1["workloads"]
    with pytest.raises(ResultsError, match="needs schema_version 2"):
        validate_results({**v1, "scaling": {"m": [[1, 1.0]]}})
    with pytest.raises(ResultsError, match="schema_version 3, this stride reads 1, 2"):
        validate_results({**res, "schema_version": 3})

    def broken(edit) -> dict:
        bad = copy.deepcopy(res)
        edit(bad["scaling"])
        return bad

    cases = [
        (lambda s: s["points"][1].pop("efficiency"), r"points\[1\] \(m ddp weak N=2\) is missing 'efficiency'"),
        (lambda s: s["points"][2].update(world_size=0), "world_size 0 is not a positive integer"),
        (lambda s: s["points"][1].update(global_batch=100), r"per_rank_batch 64 x 2 ranks != global_batch 100"),
        (lambda s: s["points"][0].update(world_size=2, global_batch=128), "the baseline runs on 1 rank, not 2"),
        (lambda s: s["points"][3].update(scaling="linear"), "scaling 'linear' is not one of"),
        (lambda s: s["points"][1].update(efficiency=float("nan")), "efficiency nan is not a finite number"),
        (lambda s: s["points"][1]["throughput"].pop("median"), "throughput is missing 'median'"),
        (lambda s: s.pop("pinning"), "scaling is missing 'pinning'"),
    ]
    for edit, msg in cases:
        with pytest.raises(ResultsError, match=msg):
            validate_results(broken(edit))


def test_report_draws_scaling_curves(tmp_path) -> None:
    entries = [_workload("m+n1") | {"world_size": 1}, _workload("m+ddp-weak-n2") | {"world_size": 2}]  # as written
    res = make_results("world-sweep", {"gpus": []}, entries, _scaling())
    (tmp_path / "results.json").write_text(json.dumps(res))
    assert main(["report", str(tmp_path)]) == 0
    html = (tmp_path / "report.html").read_text()
    # breakdown, scaling efficiency, throughput against world size: no "throughput against batch size" (the
    # weak-scaling entries' batch grows with N: not a batch sweep)
    assert html.count("<svg") == 3 and "scaling efficiency against world size (1 = ideal)" in html
    assert "against batch size" not in html
    eff_svg = html[html.index("scaling efficiency against world size (1 = ideal)"):].split("</svg>")[0]
    # one line per strategy x mode, each starting at the baseline: ddp weak has 3 points (1, 2, 4 ranks)
    assert eff_svg.count("<polyline") == 2 and eff_svg.count("<circle") == 3 + 2
    assert "m ddp weak: 4, 0.5" in eff_svg and "m fsdp strong: 2, 0.6" in eff_svg
    assert "(oversubscribed)" in html and "2 ranks" in html
    md = (tmp_path / "summary.md").read_text()
    row = ("| m | ddp | weak | 4 | 64 / 256 | 2,000 samples/s | 2.00 | 0.50 | - | 30.0% | 1.00 | 5.0% | "
           "4 on 2 (oversubscribed) |")
    assert row in md
    assert "ddp weak scaling at 2 ranks: efficiency 0.90, scales" in md
    assert "at 4 ranks: efficiency 0.50, oversubscribed" in md
    assert "fsdp strong scaling at 2 ranks: efficiency 0.60, busy machine: ranks waited for a core 40%" in md


@pytest.mark.slow
@pytest.mark.dist
def test_world_sweep_real_run(tmp_path, capsys) -> None:
    """mlp_tiny at 1 and 2 ranks (DDP, weak and strong) through `stride train` under torchrun: 3 launches."""
    small = ["--set", "data.n_steps=1024", "--set", "data.n_assets=4", "--set", "train.steps=8",
             "--set", "train.val_every=0", "--set", "metrics.skip_steps=2", "--set", "metrics.flops=false",
             "--set", "train.batch_size=64"]
    rc = main(["bench", "--sweep", "world", "--workloads", "mlp_tiny", "--world-sizes", "1,2", "--out", str(tmp_path),
               "--strategies", "ddp", "--scaling", "weak", "strong", *small])
    assert rc == 0
    res = load_results(tmp_path / "results.json")
    pts = {(p["strategy"], p["scaling"], p["world_size"]): p for p in res["scaling"]["points"]}
    assert set(pts) == {("single", "baseline", 1), ("ddp", "weak", 2), ("ddp", "strong", 2)}
    base = pts[("single", "baseline", 1)]
    for (_, scaling, n), p in pts.items():
        x = p["throughput"]["median"]
        assert x > 0 and p["global_batch"] == (128 if scaling == "weak" else 64)
        if n == 2:  # the recorded efficiency is the arithmetic on the recorded throughputs
            assert p["efficiency"] == pytest.approx(x / (2 * base["throughput"]["median"]))
    assert pts[("ddp", "weak", 2)]["exposed_comm_fraction"] is not None  # DDP's timed hook
    assert (pts[("ddp", "strong", 2)]["per_rank_batch"], pts[("ddp", "weak", 2)]["per_rank_batch"]) == (32, 64)
    names = {w["name"]: w for w in res["workloads"]}
    assert names["mlp_tiny+ddp-weak-n2"]["world_size"] == 2 and names["mlp_tiny+ddp-weak-n2"]["steps"] == 8
    log = (tmp_path / "mlp_tiny+ddp-weak-n2" / "rep0" / "torchrun.log").read_text()
    if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= 2:
        assert "local rank 0 pinned to core" in log and "local rank 1 pinned to core" in log
    if os.path.exists("/proc/self/schedstat"):  # each rank reported its scheduler accounting
        assert 0.0 <= pts[("ddp", "weak", 2)]["runqueue_wait_share"] < 1.0
    out = capsys.readouterr().out
    assert "scaling (efficiency 1.0 = ideal" in out
    # rerun with the same --out: every run finished with the same config, so none is launched again
    summary = tmp_path / "mlp_tiny+ddp-weak-n2" / "rep0" / "run" / "summary.json"
    before = summary.stat().st_mtime_ns
    assert main(["bench", "--sweep", "world", "--workloads", "mlp_tiny", "--world-sizes", "1,2", "--out",
                 str(tmp_path), "--strategies", "ddp", "--scaling", "weak", "strong", *small, "--no-report"]) == 0
    again = load_results(tmp_path / "results.json")
    assert summary.stat().st_mtime_ns == before
    assert [p["throughput"] for p in again["scaling"]["points"]] == [p["throughput"] for p in res["scaling"]["points"]]
    capsys.readouterr()
    assert main(["report", str(tmp_path)]) == 0
    assert "scaling efficiency against world size (1 = ideal)" in (tmp_path / "report.html").read_text()
