"""`stride analyze` from the command line: JSON shape, tables, and exit codes on bad input."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from synth import cpu_trace, gpu_trace, write  # noqa: E402

from stride.cli.main import main  # noqa: E402


def test_json_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "run"
    d.mkdir()
    write(d / "a.json", gpu_trace())
    cpu = cpu_trace(0)
    cpu["distributedInfo"]["world_size"] = 4  # rank 0 of the GPU trace's 4-rank run: traces of one run only
    write(d / "b.json.gz", cpu, gz=True)
    assert main(["analyze", str(d), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(rep) >= {"ranks", "stragglers"} and sorted(rep["ranks"]) == ["0", "3"]
    for r in rep["ranks"].values():
        assert set(r["temporal_breakdown"]) >= {"idle_pct", "compute_pct", "non_compute_pct"}
        assert {"comm_comp_overlap_pct", "idle_breakdown", "top_kernels", "verdict"} <= set(r)
        assert r["verdict"]["bound"] in {"compute-bound", "memory-bound", "communication-bound", "host-bound",
                                         "data-bound", "launch-bound"}
        assert r["verdict"]["recommendations"]
    assert rep["ranks"]["3"]["temporal_breakdown"]["idle_pct"] == pytest.approx(40.0)


def test_table_and_hta_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path / "a.json", gpu_trace())
    assert main(["analyze", str(p), "--hta-compatible"]) == 0
    out = capsys.readouterr().out
    assert "hta definitions" in out and "volta_sgemm_128x64_nn" in out


def test_bad_input_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A trace that cannot be read is bad input: exit 2, as every other command's (it was 1)."""
    p = tmp_path / "broken.json"
    p.write_text('{"traceEvents": [{"ph": "X", "ts": 1')
    assert main(["analyze", str(p), "--json"]) == 2
    err = capsys.readouterr().err
    assert "broken.json" in err and "truncated" in err
    assert main(["analyze", str(tmp_path / "missing")]) == 2
    assert "no such file or directory" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["[]", '{"traceEvents": []}', '{"traceEvents": [{"ph": "M", "name": "x"}]}',
                                  '{"traceEvents": [{"name": "x", "ph": "X", "ts": 1, "dur": 5}]}'])
def test_a_trace_without_complete_events_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     text: str) -> None:
    """Was an empty report (span 0.00 ms, "no stragglers") with exit 0."""
    p = tmp_path / "empty.json"
    p.write_text(text)
    assert main(["analyze", str(p)]) == 2
    out = capsys.readouterr()
    assert "empty.json" in out.err and "no complete events" in out.err and "stragglers" not in out.out


@pytest.mark.parametrize(("field", "value", "words"), [
    ("ts", "abc", "ts is 'abc', not a number"), ("ts", None, "ts is None"), ("dur", "5", "dur is '5'"),
    ("ts", True, "ts is True"), ("ts", ..., "ts is missing"),
])
def test_an_event_time_that_is_not_a_number_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      field: str, value: object, words: str) -> None:
    """A complete event with a non-numeric ts was dropped silently (a negative dur was refused); now refused,
    naming the event by index and name and the field, even for a category stride does not read."""
    trace = cpu_trace()
    ev = trace["traceEvents"][2]  # aten::mm
    if value is ...:
        del ev[field]
    else:
        ev[field] = value
    trace["traceEvents"].append({"name": "x", "ph": "X", "ts": "abc", "dur": 5})  # no category: also refused
    p = write(tmp_path / "t.json", trace)
    assert main(["analyze", str(p)]) == 2
    err = capsys.readouterr().err
    assert "t.json" in err and "traceEvents[2] (name 'aten::mm')" in err and words in err
    trace["traceEvents"][2] = cpu_trace()["traceEvents"][2]
    write(p, trace)
    assert main(["analyze", str(p)]) == 2
    assert "traceEvents[6] (name 'x'): ts is 'abc'" in capsys.readouterr().err


@pytest.mark.slow
def test_profile_is_quiet_and_advises_no_slower_precision(tmp_path: Path) -> None:
    """`stride profile` prints no profiler chatter (kineto's USDT profiler_start/stop lines, c10's
    "Memory block of unknown size" warning) and never advises a dtype this workload ran slower in."""
    import subprocess

    out = tmp_path / "prof"
    cmd = [sys.executable, "-m", "stride", "profile", "configs/quickstart.toml", "--steps", "2", "--out", str(out),
           "--json", "--set", "train.batch_size=16", "--set", "data.n_steps=1024", "--set", "train.threads=1"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parents[2])
    assert p.returncode == 0, p.stderr[-2000:]
    for chatter in ("USDT", "profiler_start", "profiler_stop", "CPUAllocator", "Memory block of unknown size"):
        assert chatter not in p.stderr + p.stdout, chatter
    rep = json.loads(p.stdout.strip().splitlines()[-1])
    recs = " ".join(rep["ranks"]["0"]["verdict"]["recommendations"])
    speeds = rep.get("dtype_speeds")
    if speeds:  # the host's matmul probe made a lower precision a candidate: the workload's step decided
        for d, v in speeds["samples_per_s"].items():
            if d != "fp32" and v < speeds["samples_per_s"]["fp32"]:
                assert f"use {d}" not in recs and f"{d} autocast" not in recs, (speeds, recs)


@pytest.mark.slow
@pytest.mark.dist
def test_profile_under_torchrun_analyses_every_rank(tmp_path: Path) -> None:
    """Before: rank 1 had no run directory and wrote its trace to ./traces in the working directory, and
    every rank analysed only the traces present when it finished."""
    import subprocess

    out, cwd = tmp_path / "prof", tmp_path / "cwd"
    cwd.mkdir()
    root = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "stride", "profile",
           str(root / "configs/quickstart.toml"), "--steps", "2", "--out", str(out), "--json",
           "--set", "parallel.dp_replicate=2", "--set", "train.threads=1", "--set", "train.batch_size=16",
           "--set", "data.n_steps=1024"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=cwd)
    assert p.returncode == 0, p.stderr[-3000:]
    assert sorted(f.name for f in (out / "traces").iterdir()) == ["trace_rank0.json", "trace_rank1.json"]
    assert not (cwd / "traces").exists()
    rep = json.loads((out / "analysis.json").read_text())
    assert sorted(rep["ranks"]) == ["0", "1"]
    # both ranks' traces carry the run's one id (rank 0's, broadcast): `stride analyze` tells runs apart by it
    metas = [json.loads((out / "traces" / f"trace_rank{r}.json").read_text()) for r in (0, 1)]
    ids = {m["stride_run_id"] for m in metas}
    assert len(ids) == 1 and len(ids.pop()) == 32
    # audit 17: each trace records the host's cores and threads and the unprofiled steps (the 3 wait steps after
    # the first); 2 ranks x (1 thread + gloo's) count gloo's time under compute as overlap only with 4 cores
    import os

    cores = len(os.sched_getaffinity(0))
    for r, m in enumerate(metas):
        assert m["stride_host"] == {"cores": cores, "intra_op_threads": 1, "ranks_on_host": 2}
        assert len(m["stride_unprofiled_step"]["steps_us"]) == 3 and m["stride_unprofiled_step"]["median_us"] > 0
        res = rep["ranks"][str(r)]
        assert res["comm_overlap_rule"]["overlap_counted"] is (cores >= 4)
        assert res["step_time"]["unprofiled_ms"] == pytest.approx(m["stride_unprofiled_step"]["median_us"] / 1e3)
    # DDP's reducer operators (bucket copies) are communication, not bandwidth-bound memory
    from stride.profile.analyze import analyze_traces

    top = analyze_traces([out / "traces"], top_k=1000)["ranks"]["0"]["top_kernels"]
    reducer = {k["kind"] for k in top if "reducer::" in k["name"]}
    assert reducer == {"communication"}
