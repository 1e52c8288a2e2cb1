"""compare's noise judgement, the recommendation rules and the HTML report, on hand-made results."""

from __future__ import annotations

import json

import pytest

from stride.bench.results import make_results
from stride.cli.main import main
from stride.report.compare import compare_results, judge
from stride.report.recommend import bottleneck, load_prices, recommend


def _w(name: str, median: float, cv: float = 0.01, mn: float | None = None, mx: float | None = None, **kw):
    base = {
        "name": name, "version": 1,
        "throughput": {"unit": "samples/s", "median": median, "min": mn or median * 0.99, "max": mx or median * 1.01,
                       "cv": cv},
        "mfu": 0.5, "peak_mem_bytes": 2**20, "time_to_target_s": 36.0, "run_dir": None,
        "step_time_breakdown_s": {"data": 0.01, "forward": 0.3, "backward": 0.6, "optimizer": 0.05, "other": 0.04},
    }
    base.update(kw)
    return base


def test_judge_uses_noise() -> None:
    a = _w("x", 100.0)["throughput"]
    assert judge(a, _w("x", 101.0)["throughput"])[1] == "within noise"
    assert judge(a, _w("x", 120.0)["throughput"]) == (pytest.approx(1.2), "faster")
    assert judge(a, _w("x", 80.0)["throughput"])[1] == "slower"
    noisy = _w("x", 120.0, cv=0.15, mn=90.0, mx=140.0)["throughput"]
    assert judge(a, noisy)[1] == "within noise"  # 20 % is inside 2 x sqrt(15² + 1²) = 30.1 %


def test_compare_handles_missing_and_versions() -> None:
    a = make_results("quick", {}, [_w("p", 100.0), _w("q", 100.0)])
    b = make_results("quick", {}, [_w("p", 150.0, version=2), _w("r", 1.0)])
    rows = {r["name"]: r["verdict"] for r in compare_results(a, b)}
    assert rows == {"p": "versions differ (1 vs 2): not comparable", "q": "missing in B", "r": "missing in A"}


def test_bottleneck_rules() -> None:
    assert bottleneck(_w("x", 1.0))[0] == "compute"
    data = _w("x", 1.0, step_time_breakdown_s={"data": 0.5, "forward": 0.25, "backward": 0.25})
    assert bottleneck(data)[0] == "data" and "50%" in bottleneck(data)[1]
    host = _w("x", 1.0, step_time_breakdown_s={"forward": 0.4, "backward": 0.4, "other": 0.2})
    assert bottleneck(host)[0] == "host"
    assert bottleneck(_w("x", 1.0, mfu=0.05))[0] == "overhead (low MFU)"


def test_advice_does_not_offer_what_the_run_already_has_and_keeps_small_shares_readable() -> None:
    """Outside audit 3: a run on fused AdamW was told to use fused AdamW; an MFU of 0.46% read "0%"."""
    opt = {"forward": 0.2, "backward": 0.4, "optimizer": 0.4}
    assert "use fused AdamW" in bottleneck(_w("x", 1.0, step_time_breakdown_s=opt, optimizer_impl="foreach"))[1]
    kind, advice = bottleneck(_w("x", 1.0, step_time_breakdown_s=opt, optimizer_impl="fused"))
    assert kind == "optimizer" and "already fused" in advice and "use fused AdamW" not in advice
    done = bottleneck(_w("x", 1.0, step_time_breakdown_s=opt, optimizer_impl="fused",
                         config={"train": {"compile": "model+optimizer"}}))[1]
    assert done.endswith("(already fused, compiled): a larger batch per step")
    assert "only 0.5% MFU" in bottleneck(_w("x", 1.0, mfu=0.0046))[1]
    assert "only 0.012% MFU" in bottleneck(_w("x", 1.0, mfu=0.00012))[1]
    assert "only 5.0% MFU" in bottleneck(_w("x", 1.0, mfu=0.05))[1]


def test_cost_per_million_samples_by_hand() -> None:
    res = make_results("quick", {"gpus": []}, [_w("m", 1000.0), _w("m+bf16", 2000.0)])
    (r,) = recommend(res, {"cpu": 3.6})
    assert r["fastest"] == "m+bf16"
    # 3.6 USD/h = 0.001 USD/s; 1e6 samples at 2000/s take 500 s
    assert r["usd_per_million_samples"] == pytest.approx(0.5)
    assert r["usd_per_run_to_target"] == pytest.approx(3.6 * 36.0 / 3600)


def test_report_renders_with_plots(tmp_path) -> None:
    run = tmp_path / "m"
    run.mkdir()
    (run / "metrics.jsonl").write_text("\n".join(json.dumps({"step": i, "loss": 1 / i, "time_s": 0.1 * i})
                                                for i in range(1, 6)) + "\n{cut")
    res = make_results("quick", {"gpus": [], "cpu_model": "test cpu"},
                       [_w("m+bs32", 1000.0, run_dir=str(run), config={"train": {"batch_size": 32}}),
                        _w("m+bs64", 1500.0, config={"train": {"batch_size": 64}})])
    (tmp_path / "results.json").write_text(json.dumps(res))
    assert main(["report", str(tmp_path)]) == 0
    html = (tmp_path / "report.html").read_text()
    assert html.count("<svg") == 3  # breakdown, loss against time, throughput against batch size
    assert "<polyline" in html and "test cpu" in html and "http" not in html.replace('http://www.w3.org', '')
    md = (tmp_path / "summary.md").read_text()
    assert "| m+bs64 | 1,500 samples/s |" in md


def test_report_bad_input(tmp_path, capsys) -> None:
    assert main(["report", str(tmp_path)]) == 2
    assert "holds neither results.json nor summary.json" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "none")]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError):
        load_prices(tmp_path / "none.toml")


def test_compare_says_which_side_did_not_measure_a_workload(tmp_path, capsys) -> None:
    a = make_results("quick", {}, [_w("p", 100.0), _w("q", 2500.0)])
    b = make_results("quick", {}, [_w("p", 101.0), _w("r", 40.0)])
    rows = {r["name"]: r for r in compare_results(a, b)}
    assert (rows["q"]["a_median"], rows["q"]["b_median"], rows["q"]["missing"]) == (2500.0, None, "B")
    assert (rows["r"]["a_median"], rows["r"]["b_median"], rows["r"]["missing"]) == (None, 40.0, "A")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "results.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b.json")]) == 0  # a directory and a file
    table = capsys.readouterr().out
    q_row = next(line for line in table.splitlines() if "│ q" in line)
    assert "2,500" in q_row and "not measured" in q_row and "missing in B" in q_row and " 0 " not in q_row


def test_compare_json_prints_only_json(tmp_path, capsys) -> None:
    res = make_results("quick", {}, [_w("p", 100.0)])
    res["partial"] = {"done": 1, "planned": 2, "pending": ["p2"]}
    (tmp_path / "results.json").write_text(json.dumps(res))
    assert main(["compare", str(tmp_path), str(tmp_path / "results.json"), "--json"]) == 0
    out = capsys.readouterr()
    rows = json.loads(out.out)  # the whole of stdout is one JSON document
    assert rows[0]["name"] == "p" and rows[0]["verdict"] == "within noise"
    assert "stopped sweep: 1 of 2 runs" in out.err  # notes go to stderr
    assert main(["report", str(tmp_path)]) == 0
    assert "stopped after 1 of 2 runs (not measured: p2)" in (tmp_path / "report.html").read_text()


def test_recommendations_never_call_a_lone_config_fastest_nor_print_dash_usd(tmp_path) -> None:
    res = make_results("quick", {"gpus": ["Mystery GPU"]}, [_w("solo", 1000.0, time_to_target_s=None),
                                                            _w("m", 1000.0), _w("m+bf16", 2000.0)])
    (tmp_path / "results.json").write_text(json.dumps(res))
    assert main(["report", str(tmp_path / "results.json")]) == 0  # a results file: the report goes beside it
    for text in ((tmp_path / "report.html").read_text(), (tmp_path / "summary.md").read_text()):
        assert "- USD" not in text and "None" not in text.split("Recommendations")[1]
        assert "solo</b>: one configuration measured: solo" in text or "**solo**: one configuration measured" in text
        assert "fastest of 2 configurations: m+bf16" in text
        assert "Cost: not computed (no price for this machine" in text
    res["environment"]["gpus"] = []
    (tmp_path / "results.json").write_text(json.dumps(res))
    assert main(["report", str(tmp_path), "--prices", str(_prices(tmp_path))]) == 0
    md = (tmp_path / "summary.md").read_text()
    assert "**solo**: one configuration measured" in md and "fastest" not in md.split("**solo**")[1].split("\n")[0]
    solo = md.split("**solo**")[1].split("\n")[0]
    assert "USD per million samples (cpu)" in solo and "per run to target" not in solo  # no time to target: omitted


def _prices(tmp_path):
    p = tmp_path / "prices.toml"
    p.write_text("[prices]\ncpu = 3.6\n")
    return p


@pytest.mark.slow
def test_compare_and_report_read_a_training_run_directory(tmp_path, capsys) -> None:
    run = tmp_path / "run"
    assert main(["train", "configs/quickstart.toml", "--out", str(run), "--no-progress", "--set", "train.steps=12",
                 "--set", "train.val_every=12", "--set", "metrics.log_every=2"]) == 0
    bench = make_results("quick", {}, [_w("quickstart", 500.0, version=None)])
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "results.json").write_text(json.dumps(bench))
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "bench"), str(run), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    summary = json.loads((run / "summary.json").read_text())
    assert row["name"] == "quickstart" and row["b_median"] == pytest.approx(summary["samples_per_s"])
    assert row["ratio"] == pytest.approx(summary["samples_per_s"] / 500.0)
    assert main(["compare", str(run / "summary.json"), str(run), "--json"]) == 0  # summary.json names its run
    verdict = json.loads(capsys.readouterr().out)[0]["verdict"]
    if summary.get("contention_note"):  # this host was busy while the run ran: no verdict either way
        assert verdict.startswith("no verdict: the host was busy"), verdict
    else:
        # the run logs 5 timed steps (every 2nd of 12, after 3 of warm-up): its spread is measured from them
        assert verdict == "within noise", verdict
    assert main(["report", str(run)]) == 0
    html = (run / "report.html").read_text()
    assert "quickstart" in html and "1 run" in html and "training loss against wall time" in html


def test_two_single_runs_say_their_noise_was_not_measured() -> None:
    """A run folder gives one throughput (cv None, n 1): the 2 % band is an assumption, and the verdict says so."""
    one = {"unit": "samples/s", "min": 100.0, "max": 100.0, "cv": None, "n": 1, "median": 100.0}
    other = {**one, "median": 110.0, "min": 110.0, "max": 110.0}
    assert judge(one, other) == (pytest.approx(1.1), "faster (noise not measured: 1 run each, 2 % assumed)")
    assert judge(one, {**one, "median": 101.0})[1].startswith("within noise (noise not measured")
    # one side with measured repeats: its CV is the band, no caveat
    assert judge(_w("x", 100.0)["throughput"], other) == (pytest.approx(1.1), "faster")
    ra = make_results("train run", {}, [_w("a", 100.0, throughput=one)])
    rb = make_results("train run", {}, [_w("b", 110.0, throughput=other)])
    (row,) = compare_results(ra, rb)
    assert row["noise_measured"] is False and "assumed" in row["verdict"]


def _run_folder(path, config: str, samples_per_s: float = 100.0, world_size: int = 1):
    """A `stride train` run folder: summary.json and the resolved config.toml (None values left out, as written)."""
    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps({
        "name": "quickstart", "steps": 5, "samples_per_s": samples_per_s, "mfu": 0.01, "peak_mem_bytes": 2**20,
        "step_time_breakdown_s": {"forward": 0.1}, "time_to_target_s": None, "world_size": world_size}))
    (path / "config.toml").write_text(config)
    return path


QUICK = ('[model]\nname = "ts_transformer"\nsize = "tiny"\n[data]\nsource = "synthetic"\nseq_len = 64\n'
         '[train]\nbatch_size = 64\nprecision = "fp32"\n[optim]\nname = "adamw"\n')


def test_compare_refuses_run_folders_of_different_workloads(tmp_path, capsys) -> None:
    """r1 (batch 64, seq 64, synthetic) against st1 (batch 16, seq 8, a store) was judged "faster" (ratio 2.089):
    bench.md's workloads are fixed definitions and compare refuses different ones; it now says which keys differ."""
    r1 = _run_folder(tmp_path / "r1", QUICK, 1704.0)
    st1 = _run_folder(tmp_path / "st1", QUICK.replace("64", "8", 1).replace("batch_size = 64", "batch_size = 16")
                      .replace('"synthetic"', '"store"\nstore = "data/st"'), 3560.0)
    for extra in ([], ["--json"]):
        assert main(["compare", str(r1), str(st1), *extra]) == 2
        out = capsys.readouterr()
        assert out.out == "" and "faster" not in out.err
        assert f"A = {r1}, B = {st1}" in out.err and "different workloads" in out.err
        for words in ("data.source 'synthetic' vs 'store'", "data.seq_len 64 vs 8", "train.batch_size 64 vs 16"):
            assert words in out.err
        assert "data.store" not in out.err  # a store's path is not what it holds (below)
    # the model's size, or the number of processes, also make another workload
    tiny_d = _run_folder(tmp_path / "d128", QUICK.replace('size = "tiny"', 'size = "tiny"\nd_model = 128'))
    assert main(["compare", str(r1), str(tiny_d)]) == 2
    assert "model.d_model None vs 128" in capsys.readouterr().err
    two = _run_folder(tmp_path / "n2", QUICK, world_size=2)
    assert main(["compare", str(r1), str(two)]) == 2
    assert "world_size 1 vs 2" in capsys.readouterr().err


def test_a_store_reached_by_another_path_is_one_workload(tmp_path, capsys) -> None:
    """The review's case: one store by a relative path in one run and an absolute one in the other (or the same data
    on another machine) was refused as two workloads; the store's path is not compared, what a sample holds is."""
    on_store = QUICK.replace('"synthetic"', '"store"\nstore = "data/ticks"')
    a = _run_folder(tmp_path / "rel", on_store, 100.0)
    b = _run_folder(tmp_path / "abs", on_store.replace('"data/ticks"', '"/home/me/proj/data/ticks"'), 110.0)
    assert main(["compare", str(a), str(b), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["ratio"] == pytest.approx(1.1)


def test_one_mismatched_workload_leaves_the_others_their_verdicts(capsys) -> None:
    """Before, one workload whose two sides differed stopped the whole comparison: no row had a verdict."""
    a = make_results("quick", {}, [_w("p", 100.0, config={"train": {"batch_size": 8}}),
                                   _w("q", 100.0, config={"train": {"batch_size": 8}})])
    b = make_results("quick", {}, [_w("p", 150.0, config={"train": {"batch_size": 8}}),
                                   _w("q", 150.0, config={"train": {"batch_size": 16}})])
    p, q = compare_results(a, b)
    assert p["verdict"] == "faster" and p["ratio"] == pytest.approx(1.5)
    assert q["ratio"] is None and "train.batch_size 8 vs 16" in q["workload_mismatch"]


def test_compare_judges_what_is_under_test(tmp_path, capsys) -> None:
    """Precision, compile, kernels, checkpointing, grad_accum, the optimizer and loader settings are what compare is
    for (bench's tradeoff variants): those runs still get a verdict."""
    base = _run_folder(tmp_path / "fp32", QUICK, 100.0)
    variant = (QUICK.replace('"fp32"', '"bf16"\ncompile = "model"\nkernels = "triton"\ngrad_accum = 4\nsteps = 7'
                             '\nactivation_checkpointing = "full"\ndevice = "cuda"')
               .replace('"adamw"', '"adafactor"\nimpl = "foreach"')
               .replace("seq_len = 64", "seq_len = 64\nprefetch = 2"))
    cand = _run_folder(tmp_path / "bf16", variant, 150.0)
    assert main(["compare", str(base), str(cand), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["ratio"] == pytest.approx(1.5) and row["verdict"].startswith("faster")
    # a results entry without a config (written by hand) is not refused on that account
    a = make_results("quick", {}, [_w("p", 100.0)])
    b = make_results("quick", {}, [_w("p", 150.0, config={"train": {"batch_size": 8}})])
    assert compare_results(a, b)[0]["verdict"] == "faster"
