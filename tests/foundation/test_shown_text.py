"""Text from input files is shown as written, and cannot act on the terminal (outside audit 14, M1, M2).

Before, rich parsed names from files as markup: `x[/bold]y` ended `compare`, `plan --from-csv`, `analyze` and `top`
with a MarkupError traceback, and `lstm[bs=64]` printed as `lstm` (so `lstm[bs=64]` and `lstm[bs=128]` read as one
name); an ESC sequence in a summary.json's name set the terminal's title and colours. Every renderer now passes such
text through `stride.shown_text` (a Text, never markup; control characters as escapes). Each test renders a name
holding both, and checks it comes out whole and inert.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from stride.cli.main import main
from stride.shown_text import literal, md_cell, plain

ROOT = Path(__file__).resolve().parents[2]
# markup that closes nothing, a bracketed part, an emoji code, a format field, and OSC / CSI sequences
HOSTILE = "x[/x]y[bold]z lstm[bs=64] :thumbs_up: {task} \x1b]0;PWNED\x07\x1b[31mRED\x9b2J"
SHOWN = "x[/x]y[bold]z lstm[bs=64] :thumbs_up: {task} \\x1b]0;PWNED\\x07\\x1b[31mRED\\x9b2J"
# for tables whose cells wrap at 80 columns
SHORT, SHORT_SHOWN = "a[/x][bold]c\x1b]0;T\x07", "a[/x][bold]c\\x1b]0;T\\x07"


def _inert(out: str, shown: str = SHOWN) -> None:
    """The output holds the name whole, and no control character that came from it."""
    assert shown in out, out
    assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out


def _render(renderable: object, width: int = 400) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width).print(renderable)
    return buf.getvalue()


def test_plain_escapes_control_characters_only() -> None:
    assert plain(HOSTILE) == SHOWN
    assert plain("a\tb\nc\x7f\u202ed\u200be") == "a\\tb\\nc\\x7f\\u202ed\\u200be"  # DEL, bidi override, zero width
    assert plain("é ü 日本 [x] |") == "é ü 日本 [x] |"
    assert plain("line 1\nline\x1b 2", lines=True) == "line 1\nline\\x1b 2"
    assert plain(5) == "5"


def test_literal_is_never_markup() -> None:
    assert _render(literal(HOSTILE)).rstrip("\n") == SHOWN
    assert literal("a", "bold").style == "bold"


def test_md_cell() -> None:
    assert md_cell("<img src=x onerror=alert(1)> a|b [t](javascript:1) \\ &amp; \x1b") == (
        "&lt;img src=x onerror=alert(1)&gt; a\\|b \\[t\\](javascript:1) \\\\ &amp;amp; \\\\x1b")


def test_train_summary_table() -> None:
    from stride.report.summary_table import print_summary

    s = {"name": HOSTILE, "steps": 3, "final_train_loss": 1.0, "final_val_loss": None, "samples_per_s": 10.0,
         "timesteps_per_s": None, "step_time_s": 0.1, "achieved_flops_per_s": 1e9, "mfu": 0.1, "mfu_error": None,
         "peak_flops_per_s": 1e10, "peak_flops_source": HOSTILE, "peak_mem_kind": "rss", "peak_mem_bytes": 2**20,
         "step_time_breakdown_s": {HOSTILE: 0.1}, "timing_note": HOSTILE}
    buf = io.StringIO()
    print_summary(s, Console(file=buf, width=400))
    out = buf.getvalue()
    _inert(out)
    assert f"stride train: {SHOWN}" in out and f"warning: {SHOWN}" in out
    assert out.count(SHOWN) == 4  # title, peak source, phase, note


def _results(tmp: Path, *names: str) -> Path:
    from stride.bench.results import make_results

    w = [{"name": n, "version": 1, "mfu": 0.5, "peak_mem_bytes": 2**20, "time_to_target_s": None,
          "step_time_breakdown_s": {"forward": 0.3}, "throughput": {"unit": "samples/s", "median": 100.0,
                                                                    "min": 99.0, "max": 101.0, "cv": 0.01, "n": 3}}
         for n in names]
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "results.json").write_text(json.dumps(make_results("quick", {}, w)))
    return tmp / "results.json"


def test_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    names = (SHORT, "lstm[bs=64]", "lstm[bs=128]")
    a, b = _results(tmp_path / "a", *names), _results(tmp_path / "b", *names)
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    _inert(out, SHORT_SHOWN)
    assert "│ lstm[bs=64]  " in out and "│ lstm[bs=128] " in out  # two names, not `lstm` twice


def test_bench_tables_and_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    from stride.bench.progress import SweepProgress
    from stride.bench.table import results_table, scaling_table, tradeoff_table, ttt_line

    w = {"name": HOSTILE, "throughput": {"unit": HOSTILE, "median": 100.0, "min": 90.0, "max": 110.0, "cv": 0.2,
                                         "n": 3},
         "mfu": 0.5, "peak_mem_bytes": 2**20, "step_time_breakdown_s": {HOSTILE: 0.1}, "time_to_target_s": None}
    out = _render(results_table({"suite": HOSTILE, "workloads": [w]}))
    _inert(out)
    assert f"stride bench: {SHOWN} suite" in out and f"({SHOWN} 20%)" in out  # the title and the noisy note
    m = {"speed_ratio": 1.0, "mem_ratio": 1.0, "activation_ratio": None, "final_val_loss": None,
         "val_loss_delta": None, "skipped_steps": 0, "bitwise_repeatable": True}
    _inert(_render(tradeoff_table(HOSTILE, {HOSTILE: m})))
    p = {"workload": HOSTILE, "strategy": HOSTILE, "scaling": "weak", "world_size": 2, "per_rank_batch": 1,
         "global_batch": 2, "throughput": w["throughput"], "speedup": 1.0, "efficiency": 1.0,
         "exposed_comm_fraction": None, "oversubscribed": False, "cores": HOSTILE}
    _inert(_render(scaling_table({"points": [p], "pinning": {"2": HOSTILE}})))
    line = ttt_line(HOSTILE, {"seconds": {"median": None}, "runs": 1, "missed": 1, "target_val_loss": 1.0})
    assert SHOWN in line and "\x1b" not in line
    for live in (False, True):
        buf = io.StringIO()
        prog = SweepProgress([(HOSTILE, 3)], Console(file=buf, width=400, force_terminal=live), live=live)
        prog.start(HOSTILE)
        prog.step(1)
        prog.finish(HOSTILE, {"throughput": {"median": 1.0, "unit": HOSTILE}})
        prog.close()
        out = buf.getvalue()
        assert SHOWN in out and "\x1b]0;" not in out and "\x07" not in out and "\x1b[31mRED" not in out


def test_train_progress_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bar's name was a markup and format string: `lstm[bs=64]` lost its part, `{x}` was a KeyError."""
    from stride.train import progress

    buf = io.StringIO()
    monkeypatch.setattr(progress, "Console", lambda stderr: Console(file=buf, width=400, force_terminal=True))
    bar = progress.TrainProgress(3, name=HOSTILE)
    assert bar.live
    bar.log(1, 2.0, 10.0)
    bar.close()
    out = buf.getvalue()
    assert SHOWN in out and "\x1b]0;" not in out and "\x07" not in out and "\x1b[31mRED" not in out


def test_plan_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from stride.cli.plan_tables import print_compare

    rows = list(csv.reader((ROOT / "data/perfmodel/published_dev.csv").open()))
    head, row = rows[0], list(rows[1])
    row[head.index("row_id")] = SHORT
    path = tmp_path / "rows.csv"
    with path.open("w", newline="") as f:
        csv.writer(f).writerows([head, row])
    assert main(["plan", "--from-csv", str(path)]) == 0
    _inert(capsys.readouterr().out, SHORT_SHOWN)
    print_compare([{"hardware": HOSTILE, "devices": 8, "reason": HOSTILE}], HOSTILE, 1e9, "cost", 0.1)
    out = capsys.readouterr().out
    assert out.count("x[/x]y[bold]z") == 3 and "\x1b" not in out  # title, hardware, reason (long cells may wrap)


def test_config_show_escapes_a_value_from_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[checkpoint]\ndir = "ck\\u001b[31mred"\n')
    assert main(["config", "show", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "\x1b[31m" not in out and "\\x1b[31mred" in out
