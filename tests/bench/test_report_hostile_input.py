"""`stride report` of someone else's results.json (outside audit 14): nothing in it becomes markup or code.

H2: report.html put `partial.done` / `partial.planned` into the page unescaped (a `<script>` there ran in the reader's
browser); every string of the input now reaches the page through html.escape, and `partial` must be counts and
names. L6: `run_dir` led the report to read any path's metrics.jsonl whole, and a non-UTF-8 one failed the report
without naming the file. L7: summary.md carried names raw (HTML, and a `|` that split the table row).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from stride.bench.results import ResultsError, make_results
from stride.cli.main import main
from stride.report.render import render_report

BREAKDOWN = {"forward": 0.3, "backward": 0.6, "optimizer": 0.05, "other": 0.05}
FIXED = {"schema", "scaling"}  # what the schema fixes: the file's kind and a scaling point's mode


def _entry(name: str, median: float = 1000.0, **kw: Any) -> dict[str, Any]:
    return {"name": name, "version": 1, "throughput": {"unit": "samples/s", "median": median, "min": median,
                                                       "max": median, "cv": 0.0, "n": 3},
            "mfu": 0.5, "peak_mem_bytes": 2**20, "time_to_target_s": None, "run_dir": None,
            "step_time_breakdown_s": dict(BREAKDOWN), **kw}


def _scaling() -> dict[str, Any]:
    t = {"unit": "samples/s", "median": 1000.0, "min": 1000.0, "max": 1000.0, "cv": 0.0}
    point = {"workload": "w", "strategy": "ddp", "world_size": 1, "per_rank_batch": 8, "global_batch": 8,
             "throughput": t, "speedup": 1.0, "efficiency": 1.0, "exposed_comm_fraction": 0.0, "oversubscribed": False,
             "cores": 2}
    return {"points": [{**point, "scaling": "baseline"},
                       {**point, "scaling": "weak", "world_size": 2, "global_batch": 16, "efficiency": 0.5,
                        "speedup": 1.0, "efficiency_rounds": [0.5, 0.52], "forward_time_per_sample_ratio": 1.3,
                        "runqueue_wait_share": 0.01}],
            "pinning": {"2": "ranks on cores 0, 1"}, "repeats": 1, "method": "weak scaling",
            "load_avg_1min": [0.1, 0.2]}


def _hostile(obj: Any, counter: list[int], key: str | None = None) -> Any:
    """`obj` with every string value (and every key of a free-form table) replaced by a distinct script."""
    def payload() -> str:
        counter[0] += 1
        return f"<script>alert({counter[0]})</script><img src=x onerror=alert({counter[0]})>|[x](javascript:1)"

    if isinstance(obj, dict):
        free = key in ("step_time_breakdown_s", "pinning", "packages")
        return {(payload() if free else k): _hostile(v, counter, k) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_hostile(v, counter, key) for v in obj]
    if isinstance(obj, str) and key not in FIXED:
        return payload()
    return obj


def test_every_string_of_the_input_stays_text(tmp_path: Path) -> None:
    res = make_results("quick", {"cpu_model": "c", "gpus": ["g"], "packages": {"torch": "2"}, "git_commit": "abc"},
                       [_entry("w"), _entry("w+bf16", 1200.0, config={"train": {"precision": "bf16"}}),
                        _entry("w+bs16", 900.0, config={"train": {"batch_size": 16}})], scaling=_scaling())
    res["partial"] = {"done": 3, "planned": 5, "pending": ["a", "b"]}
    res["tradeoffs"] = {"w": {"bf16": {"speed_ratio": 1.2}}}
    res = _hostile(res, [0])
    (tmp_path / "results.json").write_text(json.dumps(res))
    html_path, md_path = render_report(tmp_path, {"cpu": 0.1})
    html, md = html_path.read_text(), md_path.read_text()
    assert "alert(" in html  # the payloads are in the page, as text
    assert not re.search(r"<(script|img)", html, re.IGNORECASE)
    assert "&lt;script&gt;alert(" in html and "Partial results</b>: the sweep was stopped after 3 of 5 runs" in html
    # summary.md: no raw HTML, no link, and every row of a table has its header's columns
    assert not re.search(r"<(script|img)", md, re.IGNORECASE) and "[x](javascript" not in md
    widths: list[set[int]] = [set()]
    for line in md.splitlines():
        if line.startswith("|"):
            widths[-1].add(len(re.split(r"(?<!\\)\|", line)))  # split at unescaped pipes only
        elif widths[-1]:
            widths.append(set())
    assert [w for w in widths if w] == [{9}, {15}]  # results (7 columns), scaling (13)


@pytest.mark.parametrize(("partial", "why"), [
    ({"done": "<script>alert(1)</script>", "planned": 3, "pending": []}, "partial.done = '<script>alert(1)</script>'"),
    ({"done": 1, "planned": "<img src=x onerror=alert(2)>", "pending": []}, "partial.planned = '<img src=x"),
    ({"done": 4, "planned": 3, "pending": []}, "partial.planned = '3' is not a count of runs >= partial.done"),
    ({"done": True, "planned": 3, "pending": []}, "partial.done = 'True'"),
    ({"done": 1, "planned": 3, "pending": "x"}, "partial.pending is not a list of workload names"),
    ({"done": 1, "planned": 3, "pending": [1]}, "partial.pending is not a list of workload names"),
    ("stopped", "partial is str, not an object"),
])
def test_a_partial_section_that_is_not_counts_is_refused(tmp_path: Path, capsys, partial: Any, why: str) -> None:
    res = make_results("quick", {}, [_entry("w")])
    res["partial"] = partial
    path = tmp_path / "results.json"
    path.write_text(json.dumps(res))
    with pytest.raises(ResultsError, match=re.escape(why)):
        render_report(path, {})
    assert not (tmp_path / "report.html").exists()
    assert main(["report", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"stride report: {path}: partial") and err.count("\n") == 1
    assert main(["compare", str(path), str(path)]) == 2  # compare printed partial's fields too


def _metrics(folder: Path, text: str | bytes) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / "metrics.jsonl"
    p.write_bytes(text if isinstance(text, bytes) else text.encode())


POINTS = "".join(json.dumps({"step": i, "loss": 2.0 - 0.1 * i, "time_s": 0.5 * i}) + "\n" for i in range(1, 6))


def test_run_dir_is_read_only_inside_the_results_folder(tmp_path: Path, capsys) -> None:
    out, elsewhere = tmp_path / "bench", tmp_path / "elsewhere"
    _metrics(elsewhere, POINTS)
    _metrics(out / "w2", POINTS)
    res = make_results("quick", {}, [_entry("w", run_dir=str(elsewhere)), _entry("w2", run_dir=str(out / "w2"))])
    (out / "results.json").write_text(json.dumps(res))
    notes: list[str] = []
    html_path, md_path = render_report(out, {}, notes.append)
    assert notes == [f"w: no loss curve: its run_dir {elsewhere} is outside the results folder {out}: only run "
                     "folders inside it are read"]
    html = html_path.read_text()
    assert "training loss against wall time" in html and "<title>w2</title>" in html and "<title>w</title>" not in html
    assert notes[0].replace("<", "&lt;") in html and f"- {notes[0]}" in md_path.read_text()
    # the CLI says it too, on stderr, and writes the report
    assert main(["report", str(out)]) == 0
    assert f"stride report: note: {notes[0]}" in capsys.readouterr().err


def test_a_moved_results_folder_still_finds_its_runs(tmp_path: Path) -> None:
    out = tmp_path / "copied"
    _metrics(out / "w", POINTS)
    res = make_results("quick", {}, [_entry("w", run_dir="/some/other/host/runs/bench/w")])  # as written there
    (out / "results.json").write_text(json.dumps(res))
    notes: list[str] = []
    html = render_report(out, {}, notes.append)[0].read_text()
    assert notes == [] and "<title>w</title>" in html


def test_a_link_out_of_the_results_folder_is_not_followed(tmp_path: Path) -> None:
    out, elsewhere = tmp_path / "bench", tmp_path / "elsewhere"
    _metrics(elsewhere, POINTS)
    out.mkdir()
    (out / "w").symlink_to(elsewhere)
    _metrics(out / "w2", "")
    (out / "w2" / "metrics.jsonl").unlink()
    (out / "w2" / "metrics.jsonl").symlink_to(elsewhere / "metrics.jsonl")
    res = make_results("quick", {}, [_entry("w", run_dir=str(out / "w")), _entry("w2", run_dir=str(out / "w2"))])
    (out / "results.json").write_text(json.dumps(res))
    notes: list[str] = []
    html = render_report(out, {}, notes.append)[0].read_text()
    assert "training loss against wall time" not in html
    assert notes[0].startswith("w: no loss curve: its run_dir") and "outside the results folder" in notes[0]
    assert notes[1] == (f"w2: no loss curve: {out.resolve() / 'w2' / 'metrics.jsonl'} leads outside the results "
                        f"folder {out.resolve()}")


def test_an_undecodable_metrics_file_is_named_and_the_report_written(tmp_path: Path, capsys) -> None:
    out = tmp_path / "bench"
    _metrics(out / "w", b"\xff\xfe garbage\n")
    res = make_results("quick", {}, [_entry("w", run_dir=str(out / "w"))])
    (out / "results.json").write_text(json.dumps(res))
    assert main(["report", str(out)]) == 0
    err = capsys.readouterr().err
    assert (f"stride report: note: w: no loss curve: run metrics file {(out / 'w' / 'metrics.jsonl').resolve()} is "
            "not UTF-8 text (byte 0xff at offset 0)") in err
    assert (out / "report.html").exists()


def test_summary_md_escapes_names(tmp_path: Path) -> None:
    """L7: a workload named `<img src=x onerror=alert(1)> a|b` was raw HTML in summary.md, and its `|` split the
    row."""
    run = tmp_path / "run"
    run.mkdir()
    summary = {"name": "<img src=x onerror=alert(1)> a|b", "samples_per_s": 800.0, "step_time_s": 0.08, "mfu": 0.1,
               "peak_mem_bytes": 2**20, "step_time_breakdown_s": BREAKDOWN, "world_size": 1}
    (run / "summary.json").write_text(json.dumps(summary))
    md = render_report(run, {})[1].read_text()
    row = next(line for line in md.splitlines() if "onerror" in line)
    assert row.startswith("| &lt;img src=x onerror=alert(1)&gt; a\\|b | 800 samples/s |")
    assert "<img" not in md and "**&lt;img src=x onerror=alert(1)&gt; a\\|b**" in md
