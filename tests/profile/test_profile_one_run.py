"""Traces analysed together must be ranks of one run; a verdict's advice fits the device the trace ran on.

Audit: a folder with trace_rank0.json of a single-process profile and trace_rank1.json of a 2-rank DDP profile
(different trace_id, rank 0 without distributedInfo, rank 1 of world_size 2, recorded 25 min apart) was analysed
as one job: "rank 1: step start lag 1486922035.2 us". And a CPU-only trace of ProfilerStep annotations alone got
"host-bound, device idle 100%" with "CUDA graphs (mode='reduce-overhead')".
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from synth import cpu_trace, gpu_trace, host, write  # noqa: E402

from stride.cli.main import main  # noqa: E402
from stride.profile.analyze import analyze_traces  # noqa: E402
from stride.profile.errors import TraceError  # noqa: E402

MIN25_US = 25 * 60 * 1e6


def shifted(trace: dict, us: float) -> dict:
    t = copy.deepcopy(trace)
    for ev in t["traceEvents"]:
        ev["ts"] += us
    return t


def single_process(trace: dict) -> dict:
    """A profile of one process: no distributedInfo (its rank comes from the file name, or is 0)."""
    t = copy.deepcopy(trace)
    del t["distributedInfo"]
    return t


def folder(tmp_path: Path, sub: str = "traces", **traces: dict) -> Path:
    d = tmp_path / sub
    d.mkdir()
    for name, t in traces.items():
        write(d / f"{name}.json", t)
    return d


def test_the_audits_folder_is_refused_naming_both_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = folder(tmp_path, trace_rank0=single_process(cpu_trace(0)), trace_rank1=shifted(cpu_trace(1), MIN25_US))
    with pytest.raises(TraceError, match="not of one run") as err:
        analyze_traces([d])
    assert "trace_rank0.json" in str(err.value) and "trace_rank1.json" in str(err.value)
    assert "world_size 2" in str(err.value)
    assert main(["analyze", str(d)]) == 2
    out = capsys.readouterr()
    assert out.out == "" and len(out.err.strip().splitlines()) == 1  # one line, no table, no straggler lag
    assert "trace_rank0.json" in out.err and "trace_rank1.json" in out.err


def test_world_sizes_that_differ_are_refused(tmp_path: Path) -> None:
    other = cpu_trace(1)
    other["distributedInfo"]["world_size"] = 4
    with pytest.raises(TraceError, match=r"world sizes differ: \S*/r0\.json says 2, \S*/r1\.json says 4"):
        analyze_traces([folder(tmp_path, r0=cpu_trace(0), r1=other)])


def test_a_rank_outside_the_world_size_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"/r2\.json is rank 2 \(distributedInfo\) of a run of world_size 2"):
        analyze_traces([folder(tmp_path, r0=cpu_trace(0), r2=cpu_trace(2))])


def test_a_duplicated_rank_names_both_files(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"/a\.json and \S*/b\.json|/b\.json and \S*/a\.json"):
        analyze_traces([folder(tmp_path, a=cpu_trace(1), b=cpu_trace(1))])


def test_ranks_recorded_apart_in_time_are_refused(tmp_path: Path) -> None:
    d = folder(tmp_path, r0=cpu_trace(0), r1=shifted(cpu_trace(1), MIN25_US))
    with pytest.raises(TraceError, match=r"/r1\.json was recorded 25\.0 min after \S*/r0\.json ended"):
        analyze_traces([d])


def test_ranks_of_one_run_are_analysed_together(tmp_path: Path) -> None:
    # a collective 500 us late on rank 1, clocks of two hosts 0.3 s apart, ranks from the file names: all one run
    a, b = cpu_trace(0), cpu_trace(1, shift=500.0)
    for t in (a, b):
        t["traceEvents"][0]["dur"] = 1000
    rep = analyze_traces([folder(tmp_path, "late", r0=a, r1=b)])
    assert [s["rank"] for s in rep["stragglers"]] == [1]
    other_host = shifted(cpu_trace(1), 3e5)
    other_host["host_name"] = "h2"  # two hosts: one clock each (on one host, collectives 0.3 s apart cannot meet)
    skewed = analyze_traces([folder(tmp_path, "skewed", r0=cpu_trace(0), r1=other_host)])
    assert sorted(skewed["ranks"]) == ["0", "1"]
    plain = tmp_path / "plain"
    plain.mkdir()
    write(plain / "rank0.json", single_process(cpu_trace(0)))
    write(plain / "rank1.json", single_process(cpu_trace(1)))
    assert sorted(analyze_traces([plain])["ranks"]) == ["0", "1"]


def with_run_id(trace: dict, run_id: str) -> dict:
    t = copy.deepcopy(trace)
    t["stride_run_id"] = run_id
    return t


def test_stride_run_ids_tell_two_runs_apart_where_times_and_collectives_cannot(tmp_path: Path) -> None:
    """Audit 5 (F5, left): two runs on two hosts recorded less than a second apart, or without collectives, pass every
    other check. `stride profile` writes one id per run into every rank's trace; different ids are two runs."""
    other_host = shifted(cpu_trace(1), 3e5)
    other_host["host_name"] = "h2"  # the clock slack of two hosts: without ids this pair is accepted (test above)
    d = folder(tmp_path, r0=with_run_id(cpu_trace(0), "a" * 32), r1=with_run_id(other_host, "b" * 32))
    with pytest.raises(TraceError, match=r"stride run ids differ: \S*/r0\.json is of run aaaaaaaaaaaa, \S*/r1\.json is "
                                         r"of run bbbbbbbbbbbb"):
        analyze_traces([d])
    mixed = folder(tmp_path, "mixed", r0=with_run_id(cpu_trace(0), "a" * 32), r1=cpu_trace(1))
    with pytest.raises(TraceError, match=r"/r0\.json was written by `stride profile` \(run id aaaaaaaaaaaa\), "
                                         r"\S*/r1\.json carries no stride run id"):
        analyze_traces([mixed])


def test_one_stride_run_id_is_one_run_even_where_the_clocks_disagree(tmp_path: Path) -> None:
    """Two hosts whose clocks are 5 s apart (beyond the 1 s slack) are refused without ids, and accepted with one."""
    late = shifted(cpu_trace(1), 5e6)
    late["host_name"] = "h2"
    with pytest.raises(TraceError, match="after"):
        analyze_traces([folder(tmp_path, "bare", r0=cpu_trace(0), r1=late)])
    same = folder(tmp_path, "same", r0=with_run_id(cpu_trace(0), "c" * 32), r1=with_run_id(late, "c" * 32))
    assert sorted(analyze_traces([same])["ranks"]) == ["0", "1"]
    # one id does not excuse one rank given twice, or a rank beyond the world size
    with pytest.raises(TraceError, match="both rank 1"):
        analyze_traces([folder(tmp_path, "twice", a=with_run_id(cpu_trace(1), "c" * 32),
                                b=with_run_id(shifted(cpu_trace(1), 7.0), "c" * 32))])


def test_the_profilers_base_time_is_part_of_the_clock(tmp_path: Path) -> None:
    """Newer Kineto writes ts relative to baseTimeNanoseconds: the same ts under bases 25 min apart is not one run;
    other ts under other bases at the same moment is. (Kineto's ts are never negative: each rank's events are 25 min
    after its base, and the later base's rank is moved back to its own zero.)"""
    a, b = shifted(cpu_trace(0), MIN25_US), shifted(cpu_trace(1), MIN25_US)
    a["baseTimeNanoseconds"], b["baseTimeNanoseconds"] = 1_790_000_000_000_000_000, 1_790_000_000_000_000_000 + int(
        MIN25_US * 1e3)
    with pytest.raises(TraceError, match="25.0 min after"):
        analyze_traces([folder(tmp_path, r0=a, r1=b)])
    same = folder(tmp_path, "same", r0=a, r1=shifted(b, -MIN25_US))
    assert sorted(analyze_traces([same])["ranks"]) == ["0", "1"]


# -- one rank's trace given twice (audit 2: a copy or symlink of rank 0's trace named `*_rank1.json` was analysed as
# rank 1, with identical rows and "no stragglers") ------------------------------------------------------------------


def _one_line_refusal(capsys: pytest.CaptureFixture[str], *paths: Path) -> str:
    assert main(["analyze", *map(str, paths)]) == 2
    out = capsys.readouterr()
    assert out.out == "" and len(out.err.strip().splitlines()) == 1, out.err
    return out.err


def test_a_symlink_to_rank0s_trace_named_rank1_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = folder(tmp_path, trace_rank0=single_process(cpu_trace(0)))
    (d / "link_rank1.json").symlink_to(d / "trace_rank0.json")
    err = _one_line_refusal(capsys, d)
    assert "given twice" in err and "link_rank1.json and" in err and "trace_rank0.json are one file" in err
    with pytest.raises(TraceError, match="one file"):  # the same through the Python API
        analyze_traces([d])


@pytest.mark.parametrize("gz", [False, True])
def test_a_copy_of_rank0s_trace_named_rank1_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       gz: bool) -> None:
    trace = single_process(cpu_trace(0))
    d = folder(tmp_path, trace_rank0=trace)
    write(d / ("copy_rank1.json.gz" if gz else "copy_rank1.json"), trace, gz=gz)  # the same events, recompressed too
    err = _one_line_refusal(capsys, d)
    assert "copies of one trace" in err and "copy_rank1.json" in err and "trace_rank0.json" in err
    assert "process ids and event times" in err


def test_the_same_file_twice_is_said_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = write(tmp_path / "trace_rank0.json", single_process(cpu_trace(0)))
    err = _one_line_refusal(capsys, f, f)
    assert f"{f} is given twice" in err


def test_two_processes_with_equal_times_are_two_ranks(tmp_path: Path) -> None:
    """Not a copy: another process (pid) or host, or other times, is another rank's trace."""
    base = single_process(cpu_trace(0))
    other_host = copy.deepcopy(base)
    other_host["host_name"] = "h2"
    d = folder(tmp_path, rank0=base, rank1=single_process(cpu_trace(1)), rank2=other_host, rank3=shifted(base, 3.0))
    assert sorted(analyze_traces([d])["ranks"]) == ["0", "1", "2", "3"]


def test_a_trace_without_step_markers_shows_no_literal_none(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    ev = [e for e in single_process(cpu_trace(0))["traceEvents"] if not e["name"].startswith("ProfilerStep")]
    p = write(tmp_path / "nosteps.json", {"schemaVersion": 1, "host_name": "h", "traceEvents": ev})
    assert main(["analyze", str(p)]) == 0
    table = capsys.readouterr().out.split("rank 0: top")[0]
    assert "None" not in table and "whole trace" in table, table
    assert analyze_traces([p])["ranks"]["0"]["steps"] == [None]  # the JSON keeps null: no step number


# -- advice that fits the device -------------------------------------------------------------------------------

GPU_ONLY = ("CUDA", "cuDNN", "pin_memory", "host-device", "tensor cores")


def test_a_cpu_trace_of_step_annotations_alone_is_not_judged(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    ev = [host(f"ProfilerStep#{k}", 100 * k, 100, cat="user_annotation") for k in (1, 2, 3)]
    p = write(tmp_path / "steps.json", {"schemaVersion": 1, "host_name": "h", "traceEvents": ev})
    r = analyze_traces([p])["ranks"]["0"]
    assert r["device"] == "cpu"
    v = r["verdict"]
    assert v["bound"] == "no-activity" and v["steps_by_bound"] == {"no-activity": 3}
    assert "records no CPU operators" in v["reasons"][0]
    text = " ".join(v["recommendations"] + v["reasons"])
    assert not any(w in text for w in GPU_ONLY), text
    assert all(s["verdict"]["bound"] == "no-activity" for s in r["per_step"])
    assert main(["analyze", str(p)]) == 0
    out = capsys.readouterr().out
    assert "CUDA graphs" not in out and "device idle" not in out


def test_a_host_bound_cpu_trace_gets_cpu_advice(tmp_path: Path) -> None:
    """60 % of the step outside any operator: host-bound, but no CUDA graphs or host-device syncs on a CPU."""
    ev = [host("ProfilerStep#1", 0, 100, cat="user_annotation"), host("aten::mm", 0, 40)]
    r = analyze_traces([write(tmp_path / "c.json", {"traceEvents": ev})])["ranks"]["0"]
    v = r["verdict"]
    assert v["bound"] == "host-bound"
    assert v["reasons"][0].startswith("no CPU operator running 60.0% of the step")
    text = " ".join(v["recommendations"])
    assert "torch.compile" in text and not any(w in text for w in GPU_ONLY), text
    assert r["per_step"][0]["verdict"]["recommendations"] == v["recommendations"]


def test_a_data_bound_cpu_trace_is_not_told_to_pin_memory(tmp_path: Path) -> None:
    ev = [host("ProfilerStep#1", 0, 100, cat="user_annotation"), host("## data_load ##", 0, 60, cat="user_annotation"),
          host("aten::mm", 60, 40)]
    v = analyze_traces([write(tmp_path / "d.json", {"traceEvents": ev})])["ranks"]["0"]["verdict"]
    assert v["bound"] == "data-bound" and "num_workers" in " ".join(v["recommendations"])
    assert not any(w in " ".join(v["recommendations"]) for w in GPU_ONLY)


def test_a_launch_bound_cpu_trace_gets_no_cuda_graphs(tmp_path: Path) -> None:
    from test_profile_verdict import cpu_tiny_ops_trace

    v = analyze_traces([write(tmp_path / "t.json", cpu_tiny_ops_trace())])["ranks"]["0"]["verdict"]
    assert v["bound"] == "launch-bound" and "torch.compile" in " ".join(v["recommendations"])
    assert not any(w in " ".join(v["recommendations"]) for w in GPU_ONLY)


def test_a_gpu_trace_keeps_its_gpu_advice(tmp_path: Path) -> None:
    v = analyze_traces([write(tmp_path / "g.json", gpu_trace())])["ranks"]["3"]["verdict"]
    assert v["bound"] == "host-bound" and v["reasons"][0].startswith("device idle 40.0%")
    assert "CUDA graphs" in " ".join(v["recommendations"])


# -- audit 5: two runs recorded at the same time (F5), and same-named files from two folders (F8) ---------------------


def ddp_rank(rank: int, run_shift_us: float = 0.0) -> dict:
    """Rank `rank` of a 2-rank gloo run on host "h": a 300 ms step with one all-reduce on gloo's thread, entered at
    100 ms by rank 0 and 150 ms by rank 1, done on both at 200 ms (a collective ends when the last rank is in).
    `run_shift_us` moves the whole run: another run of the same script started that much later."""
    start = 100_000.0 if rank == 0 else 150_000.0
    ev = [host("ProfilerStep#7", 0, 300_000, cat="user_annotation"), host("aten::mm", 10_000, 80_000),
          host("c10d::allreduce_", start - 100, 50), host("gloo:all_reduce", start, 200_000 - start,
                                                         cat="user_annotation", tid=9)]
    for e in ev:
        e["pid"], e["ts"] = 1000 + rank, e["ts"] + run_shift_us
    return {"schemaVersion": 1, "host_name": "h", "distributedInfo": {"backend": "gloo", "rank": rank,
            "world_size": 2}, "traceEvents": ev}


def test_ranks_of_two_runs_recorded_together_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The audit's s9_ovA rank 0 beside s9_ovB rank 1: same world size, ranks 0 and 1, overlapping times and identical
    metadata. Run B started 250 ms after run A: A's rank 0 finished its all-reduce 200 ms before B's rank 1 began
    it, which no all-reduce of one job can do."""
    one = folder(tmp_path, "one", trace_rank0=ddp_rank(0), trace_rank1=ddp_rank(1))
    assert sorted(analyze_traces([one])["ranks"]) == ["0", "1"]  # one run: they meet
    mixed = folder(tmp_path, "mixed", trace_rank0=ddp_rank(0), trace_rank1=ddp_rank(1, run_shift_us=250_000))
    err = _one_line_refusal(capsys, mixed)
    assert "do not meet" in err and "gloo:all_reduce #1 of step 7: on rank 0 200.0 ms before rank 1's began" in err
    assert str(mixed / "trace_rank0.json") in err and str(mixed / "trace_rank1.json") in err
    assert "1 of 1 matched" in err


def test_same_named_traces_of_two_folders_are_named_by_path(tmp_path: Path) -> None:
    """Was "trace_rank0.json and trace_rank0.json are both rank 0"."""
    a = folder(tmp_path, "runA", trace_rank0=cpu_trace(0)) / "trace_rank0.json"
    b = folder(tmp_path, "runB", trace_rank0=shifted(cpu_trace(0), 3.0)) / "trace_rank0.json"
    with pytest.raises(TraceError, match="are both rank 0") as err:
        analyze_traces([a, b])
    assert f"{b} and {a}" in str(err.value) or f"{a} and {b}" in str(err.value)
