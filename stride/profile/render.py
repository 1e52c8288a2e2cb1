"""Rich tables for `stride analyze` (the JSON report is the source; this only formats it)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from stride.shown_text import literal, plain


def _f(x: float | None, unit: str = "%") -> str:
    return "-" if x is None else f"{x:.1f}{unit}"


def _steps(steps: list[int | None]) -> str:
    """The profiler steps a row covers; a trace without `ProfilerStep` annotations is analysed as one window from
    its first to its last event (its step is null in the JSON): "whole trace", not the literal None."""
    named = [str(s) for s in steps if s is not None]
    return ",".join(named) if named else "whole trace" if steps else "-"


def _cut(name: str, width: int) -> Text:
    """A trace's name (from the file: shown as written, never as markup or terminal control), cut to `width`."""
    shown = plain(name)
    return literal(shown if len(shown) <= width else shown[:width - 3] + "...")


def render_report(report: dict, console: Console | None = None) -> None:
    """The tables of `analyze_traces`' report. Every name in it comes from a trace file (operators, kernels,
    annotations, files): shown through `stride.shown_text`, so `[...]` stays text and escape sequences are inert."""
    con = console or Console(width=160) if console is None and not Console().is_terminal else console or Console()
    hta = report["definitions"] == "hta"
    for sk in report.get("skipped_files") or []:
        con.print(literal(f"skipped {sk['file']}: {sk['why']}", "yellow"))
    t = Table(title=f"Where the step time goes ({report['definitions']} definitions; % of the step"
                    + ("" if hta else ": compute + exposed comm + exposed memory + other + idle = 100")
                    + ("; host and kernel wait: % of HTA's per-stream idle split; the verdict is from stride's own "
                       "figures, as without --hta-compatible" if hta else "")
                    + ("; the last profiler step left out, as HTA does: --include-last-step keeps it)"
                       if report.get("last_step_dropped") else ")"))
    # the shares the verdicts rest on, which add up to the step (non-compute, their sum, is in the JSON)
    for col in ("rank", "device", "steps", "span ms", "compute", "exposed comm", "exposed memory", "other", "idle",
                "comm overlap", "host wait", "kernel wait", "data wait", "verdict"):  # waits: shares of the step
        t.add_column(col, justify="right" if col not in ("device", "verdict") else "left",
                     no_wrap=col in ("steps", "verdict"),
                     min_width=len("communication-bound") if col == "verdict" else None)
    for rank, r in report["ranks"].items():
        tb, ib = r["temporal_breakdown"], r["idle_breakdown"] or {}
        idle = tb["idle_pct"]

        def of_step(share_of_idle: float | None, idle: float | None = idle) -> float | None:
            if hta or share_of_idle is None or idle is None:
                return share_of_idle  # HTA sums gaps per stream: not a part of the step's idle time
            return share_of_idle * idle / 100

        t.add_row(literal(rank), literal(r["device"]), literal(_steps(r["steps"])), f"{r['span_us'] / 1e3:.2f}",
                  _f(tb["compute_pct"]), _f(tb.get("exposed_comm_pct")), _f(tb.get("exposed_memory_pct")),
                  _f(tb.get("other_busy_pct")), _f(idle), _f(r["comm_comp_overlap_pct"]),
                  _f(of_step(ib.get("host_wait_pct"))), _f(of_step(ib.get("kernel_wait_pct"))),
                  _f(tb.get("data_wait_pct")), literal((r["verdict"] or {}).get("bound", "-")))
    con.print(t)
    for rank, r in report["ranks"].items():
        what = "kernels" if r["device"] == "gpu" else "CPU operators (by self time)"
        k = Table(title=literal(f"rank {rank}: top {what}"))
        for col in ("name", "kind", "count", "total ms", "self ms", "mean us", "share", "launch delay us"):
            k.add_column(col, justify="left" if col in ("name", "kind") else "right")
        for row in r["top_kernels"]:
            self_ms = "-" if row["self_us"] is None else f"{row['self_us'] / 1e3:.3f}"
            k.add_row(_cut(row["name"], 48), literal(row["kind"]), str(row["count"]), f"{row['total_us'] / 1e3:.3f}",
                      self_ms, f"{row['mean_us']:.1f}", _f(row["pct_of_kernel_time"]), _f(row["launch_delay_us"], ""))
        con.print(k)
        if r["annotations"]:
            a = Table(title=literal(f"rank {rank}: annotations"))
            for col in ("name", "count", "total ms", "share of step"):
                a.add_column(col, justify="left" if col == "name" else "right")
            for row in r["annotations"]:
                a.add_row(_cut(row["name"], 70), str(row["count"]), f"{row['total_us'] / 1e3:.3f}",
                          _f(row["pct_of_step"]))
            con.print(a)
        ot = r.get("operator_time")  # CPU traces: what the operators' own time went to
        if ot:
            con.print(literal(f"rank {rank}: operator time, % of the step: matmul/conv {_f(ot['math_pct'])}, "
                              f"bandwidth-bound (elementwise, reductions, copies, norms) {_f(ot['bandwidth_pct'])}, "
                              f"other {_f(ot['other_pct'])}, compiled graphs {_f(ot['compiled_pct'])}, data loader "
                              f"{_f(ot['data_loading_pct'])}"))
        kt = r.get("kernel_time")  # GPU traces: the compute share by what bounds its kernels
        if kt:
            con.print(literal(f"rank {rank}: compute kernels, % of the step: matmul/conv {_f(kt['math_pct'])}, "
                              f"bandwidth-bound (elementwise, reductions, norms, indexing) {_f(kt['bandwidth_pct'])}, "
                              f"other {_f(kt['other_pct'])}"))
        if r.get("devices_note"):  # one trace, several GPUs: the figures are of their union
            con.print(literal(f"rank {rank}: {r['devices_note']}", "yellow"))
        if (r.get("idle_breakdown") or {}).get("note"):
            con.print(literal(f"rank {rank}: {r['idle_breakdown']['note']}", "yellow"))
        if r.get("data_wait_note"):
            con.print(literal(f"rank {rank}: {r['data_wait_note']}"))
        rule = r.get("comm_overlap_rule")
        if rule:
            con.print(literal(f"rank {rank}: communication under compute counted as "
                              f"{'overlapped' if rule['overlap_counted'] else 'exposed'} "
                              f"({_f(rule.get('concurrent_pct'))} of it ran under compute): {rule['reason']}"))
        st = r.get("step_time") or {}
        if st.get("unprofiled_ms"):
            con.print(literal(f"rank {rank}: {step_time_line(st)}"))
        elif st.get("note"):
            con.print(literal(f"rank {rank}: {st['note']}"))
        bad = r.get("malformed_events") or {}
        if bad.get("count"):  # left out of every figure above: said, so a damaged trace is not read as whole
            reasons = ", ".join(f"{why}: {n:,}" for why, n in bad["reasons"].items())
            con.print(literal(f"rank {rank}: {bad['count']:,} of the trace's {bad['of']:,} events left out as "
                              f"malformed ({reasons}; first: {bad['first']}): the figures above are without them",
                              "yellow"))
        dup = r.get("duplicate_events") or {}
        if dup.get("count"):  # dropped, not counted twice: said, so the trace's damage is not hidden either
            con.print(literal(f"rank {rank}: {dup['count']:,} of the trace's {dup['of']:,} events are exact duplicates "
                              "of another (same name, ts, dur, pid, tid, category and args), dropped: each event is "
                              "counted once", "yellow"))
        if r["verdict"]:
            v = r["verdict"]
            con.print(Text.assemble(literal(f"rank {rank}: {v['bound']}", "bold"),
                                    literal(" — " + "; ".join(v["reasons"]))))
            for rec in v["recommendations"]:
                con.print(literal(f"  • {rec}"))
    if report.get("stragglers_note"):  # a part of the run's ranks: nothing to say either way
        con.print(literal(report["stragglers_note"], "yellow"))
    elif report["stragglers"]:
        s = Table(title=literal(f"stragglers (collective lag: {report['stragglers'][0]['lag_measure']})"))
        for col in ("rank", "collective start lag us", "step start lag us", "threshold us"):
            s.add_column(col, justify="right")
        for row in report["stragglers"]:
            s.add_row(literal(row["rank"]), _f(row["collective_start_lag_us"], ""), _f(row["step_start_lag_us"], ""),
                      _f(row["threshold_us"], ""))
        con.print(s)
        top = report["stragglers"][0]
        for w in top.get("waiting_ranks") or []:
            con.print(literal(f"rank {w['rank']} waits for rank {top['rank']}: {w['wait_us_per_step'] / 1e3:.2f} ms "
                              f"per step ({_f(w['wait_pct_of_step'])} of its step) of its "
                              f"{w['collective_us_per_step'] / 1e3:.2f} ms in collectives, against rank "
                              f"{top['rank']}'s {top['collective_us_per_step'] / 1e3:.2f} ms"))
    else:
        con.print("no stragglers")


def step_time_line(st: dict) -> str:
    """The profiled step beside the unprofiled one, and where the difference went: the part in idle time (which the
    idle rule leaves out) and, past it, time inside operators (the profiler's per-operator cost, or a busy host), which
    no rule can take out: "the profiler's own cost is 2.7 % of the step" beside a 2.45x longer step read as a
    contradiction (first-contact audit of 2026-12-06)."""
    added = st["profiled_ms"] - st["unprofiled_ms"]
    line = (f"profiled step {st['profiled_ms']:.2f} ms, unprofiled {st['unprofiled_ms']:.2f} ms ({st['ratio']:.2f}x)")
    if added <= 0:
        return line + ": profiling added nothing measurable"
    idle_ms = (st.get("profiler_idle_pct") or 0.0) / 100 * st["profiled_ms"]
    line += f": {added:.2f} ms added, {idle_ms:.2f} ms of it as idle time (the idle rule leaves it out)"
    inside = added - idle_ms
    if inside > 0.1 * st["unprofiled_ms"]:
        line += (f"; the other {inside:.2f} ms ran inside operators (the profiler's per-operator cost, or a busy "
                 "host), so the shares above are of the slowed step")
    return line
