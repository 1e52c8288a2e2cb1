"""`report.html` (self-contained, plots inline) and `summary.md` from results, a bench or a training run."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from html import escape
from pathlib import Path
from typing import Any

from stride.bench.scaling import host_mfu, host_mfu_note, oversubscribed_entries
from stride.bench.stats import spread_text
from stride.files.input_file import InputFileError, read_input_text
from stride.metrics.run_dir import atomic_write_text
from stride.report.axes import ema, smoothing_span
from stride.report.inputs import resolve
from stride.report.recommend import recommend, scaling_advice, ttt_groups
from stride.report.svg import hbar_chart, line_chart
from stride.shown_text import md_cell, plain


def _gpus(env: dict[str, Any]) -> str:
    gpus = env.get("gpus") or []
    return ", ".join(map(str, gpus if isinstance(gpus, list) else [gpus])) or "none"


def _torch(env: dict[str, Any]) -> Any:
    packages = env.get("packages")
    return packages.get("torch") if isinstance(packages, dict) else None


def _h(value: Any) -> str:
    """Any value for report.html: its text, HTML-escaped (the input's names, units and notes are someone's text)."""
    return escape(str(value))


METRICS_MAX_BYTES = 256 << 20  # a run's metrics.jsonl: about 200 bytes a logged step


def _run_folder(run_dir: Any, results_dir: Path) -> tuple[Path | None, str | None]:
    """(the folder of a workload's `run_dir` inside the results folder, or None; why not, or None where there is
    none to read). results.json is an input file: its `run_dir` named any path, which the report read whole (outside
    audit 14, L6). Only a folder inside the results folder is read (symbolic links resolved): the path as written
    (relative: from the working directory, as `stride bench` writes it), else its last parts under the results
    folder (a results folder copied or moved elsewhere keeps its runs beside it)."""
    if not isinstance(run_dir, str) or not run_dir:
        return None, None
    home = results_dir.resolve()

    def inside(q: Path) -> Path | None:
        try:
            real = q.resolve()
        except (OSError, RuntimeError):  # a symbolic link loop
            return None
        return real if real == home or home in real.parents else None

    p = Path(run_dir)
    for cand in [p, *(results_dir / Path(*p.parts[k:]) for k in range(1, len(p.parts)))]:
        folder = inside(cand)
        if folder is not None and (folder / "metrics.jsonl").exists():
            if inside(folder / "metrics.jsonl") is None:  # a link out of the folder
                return None, f"{plain(folder / 'metrics.jsonl')} leads outside the results folder {plain(home)}"
            return folder, None
    if (p / "metrics.jsonl").exists() and inside(p) is None:
        return None, (f"its run_dir {plain(run_dir)} is outside the results folder {plain(home)}: only run "
                      "folders inside it are read")
    return None, None  # the run folder was not kept with the results: no curve, as before


def _loss_curves(results: dict[str, Any], results_dir: Path, notes: list[str]) -> dict[str, list[tuple[float, float]]]:
    """Training loss against time from each workload's metrics.jsonl; a run folder that cannot be read is left out
    with a note (`notes`) naming the file and why."""
    curves = {}
    for w in results["workloads"]:
        folder, why = _run_folder(w.get("run_dir"), results_dir)
        if folder is None:
            if why:
                notes.append(f"{plain(w['name'])}: no loss curve: {why}")
            continue
        path = folder / "metrics.jsonl"
        try:
            text = read_input_text(path, limit=METRICS_MAX_BYTES, what="run metrics file")
        except InputFileError as exc:  # not UTF-8, too large, a FIFO or a device: named, and the report goes on
            notes.append(f"{plain(w['name'])}: no loss curve: {exc}")
            continue
        pts = []
        *whole, cut = text.split("\n")  # `cut`: after the last newline, a line a kill can leave cut short
        bad: list[int] = []  # the numbers of whole lines that are not JSON (stride top refuses them; said here)
        for n, line in enumerate([*whole, cut], 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError):
                if n <= len(whole):  # a whole line: damaged or edited; a cut last one is a killed run's, left out
                    bad.append(n)
                continue
            if isinstance(rec, dict) and all(isinstance(rec.get(k), int | float) and math.isfinite(rec[k])
                                             for k in ("loss", "time_s")):
                pts.append((rec["time_s"], rec["loss"]))  # a diverged run's NaN losses have no place on the axis
        if bad:  # was left out without a word, while `stride top` refused the same file
            notes.append(f"{plain(w['name'])}: {plain(path)}: {len(bad)} line(s) that are not JSON left out of the "
                         f"loss curve (the first: line {bad[0]}); stride writes whole JSON lines: the file is damaged "
                         "or was edited")
        if pts:
            curves[w["name"]] = pts
    return curves


def _smoothed(curves: dict[str, list[tuple[float, float]]]) -> tuple[dict[str, list[tuple[float, float]]], bool]:
    """Each curve through an EMA over about a fifth of its points; whether any curve was smoothed."""
    out, smoothed = {}, False
    for name, pts in curves.items():
        span = smoothing_span(len(pts))
        smoothed |= span > 1
        label = f"{name} (EMA {span})" if span > 1 else name
        out[label] = list(zip([x for x, _ in pts], ema([y for _, y in pts], span), strict=True))
    return out, smoothed


def _batch_curves(results: dict[str, Any]) -> tuple[dict[str, list[tuple[float, float]]], str]:
    """Throughput against batch size from a batch sweep's entries (`name+bs<N>`) only: other sweeps change
    the batch for other reasons (weak scaling multiplies it by the world size)."""
    curves: dict[str, list[tuple[float, float]]] = {}
    units = set()
    for w in results["workloads"]:
        base, _, variant = w["name"].partition("+")
        bs = (w.get("config") or {}).get("train", {}).get("batch_size")
        if re.fullmatch(r"bs\d+", variant) and bs and w["throughput"]["median"]:
            curves.setdefault(base, []).append((bs, w["throughput"]["median"]))
            units.add(w["throughput"]["unit"])
    return {k: sorted(v) for k, v in curves.items() if len(v) > 1}, " / ".join(sorted(units))


def _variant_bars(results: dict[str, Any]) -> list[str]:
    """Throughput per variant (tradeoffs, seeds), bars from zero with min-max whiskers, one chart per workload."""
    groups: dict[str, list[dict[str, Any]]] = {}
    world = {p.get("entry") for p in (results.get("scaling") or {}).get("points", [])}  # drawn against N instead
    for w in results["workloads"]:
        base, _, variant = w["name"].partition("+")
        if (variant and not re.fullmatch(r"bs\d+", variant) and "world_size" not in w and w["name"] not in world
                and w["throughput"]["median"]):
            groups.setdefault(base, []).append(w)
    charts = []
    for base, ws in groups.items():
        if len(ws) < 2:
            continue
        unit = ws[0]["throughput"]["unit"]
        bars = {w["name"].partition("+")[2]: {"median": w["throughput"]["median"]} for w in ws}
        whiskers = {w["name"].partition("+")[2]: (w["throughput"]["min"], w["throughput"]["max"]) for w in ws
                    if w["throughput"].get("n", 2) > 1 and w["throughput"]["min"] is not None}
        charts.append(hbar_chart(bars, f"{base}: throughput per variant (median, whiskers min-max)",
                                 f"throughput ({unit})", whiskers=whiskers))
    return charts


def _efficiency(p: dict[str, Any]) -> float | None:
    return p["efficiency"]


def _throughput(p: dict[str, Any]) -> float | None:
    return p["throughput"]["median"]


def _scaling_curves(results: dict[str, Any], figure: Callable[[dict[str, Any]], float | None]
                    ) -> dict[str, list[tuple[float, float]]]:
    """{"workload strategy mode": [(N, figure)]} from the scaling section, each from the 1-rank baseline."""
    points = (results.get("scaling") or {}).get("points", [])
    base = {p["workload"]: p for p in points if p["scaling"] == "baseline"}
    curves: dict[str, list[tuple[float, float]]] = {}
    for p in points:
        y = figure(p)
        if p["scaling"] == "baseline" or y is None:
            continue
        name = f"{p['workload']} {p['strategy']} {p['scaling']}"
        b = base.get(p["workload"])
        if name not in curves and b is not None and figure(b) is not None:
            curves[name] = [(1, figure(b))]
        curves.setdefault(name, []).append((p["world_size"], y))
    return {k: sorted(v) for k, v in curves.items()}


def _scaling_rows(results: dict[str, Any]) -> list[list[str]]:
    rows = []
    for p in (results.get("scaling") or {}).get("points", []):
        rounds = [e for e in p.get("efficiency_rounds") or [] if e is not None]
        cores = f"{p['world_size']} on {p.get('cores', '?')}" + (" (oversubscribed)" if p["oversubscribed"] else "")
        rows.append([p["workload"], p["strategy"], p["scaling"], str(p["world_size"]),
                     f"{p['per_rank_batch']} / {p['global_batch']}",
                     f"{_fmt(p['throughput']['median'], ',.0f')} {p['throughput']['unit']}",
                     _fmt(p["speedup"], ".2f"), _fmt(p["efficiency"], ".2f"),
                     f"{min(rounds):.2f}-{max(rounds):.2f}" if len(rounds) > 1 else "-",
                     _pct(p["exposed_comm_fraction"]),
                     _fmt(p.get("forward_time_per_sample_ratio"), ".2f"), _pct(p.get("runqueue_wait_share")), cores])
    return rows


SCALING_HEAD = ["workload", "strategy", "mode", "N", "batch per rank / global", "throughput", "speed-up",
                "efficiency", "range over rounds", "exposed comm", "forward per sample vs 1 rank",
                "waited for a core", "ranks on cores"]


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _at_median(w: dict[str, Any]) -> bool:
    """Whether an entry's MFU is at its median throughput's step time (`rates_at`, stride bench); a `stride train`
    run's (one measurement) and an older results.json's are the mean over the timed steps."""
    return bool(w.get("rates_at"))


def _head(results: dict[str, Any]) -> list[str]:
    """The table's columns, each saying which statistic it shows (outside audit 13, L6: a `stride train` folder's
    report headed "MFU (at median)" over the mean of its timed steps)."""
    ws = results["workloads"]
    runs = all(w.get("source") == "stride train" for w in ws)
    at_median = [_at_median(w) for w in ws]
    mfu = ("MFU (at median)" if all(at_median) else "MFU (mean over timed steps)" if not any(at_median)
           else "MFU (at median unless marked mean)")
    return ["workload", "throughput (over timed steps)" if runs else "throughput (median)", "cv (spread)", mfu,
            *HEAD[4:]]


def _ttt_cell(w: dict[str, Any]) -> str:
    """An entry's time to target: seconds, "missed (target X)" where it had a target and did not reach it, "-" where it
    had none (a miss read "-", the same as no target)."""
    ttt, target = w.get("time_to_target_s"), w.get("target_val_loss")
    if ttt is not None:
        return format(ttt, ".1f")
    if finite(target):
        return f"missed (target {target:g})"
    return "-"


def finite(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _mfu_cell(w: dict[str, Any], mixed: bool, over: dict[str, dict[str, Any]]) -> str:
    """MFU in percent; an oversubscribed world point's against the host's real peak, marked (`host_mfu`)."""
    p = over.get(w["name"])
    if p is not None and w["mfu"] is not None:
        v = host_mfu(w["mfu"], p)
        if v is not None:
            return f"{100 * v:.1f}% (host peak, {p['world_size']} ranks on {p['cores']} cores)"
    return _fmt(w["mfu"] and 100 * w["mfu"], ".1f") + "%" + (" (mean)" if mixed and not _at_median(w) else "")


def _name_cell(w: dict[str, Any]) -> str:
    """A `stride train` run of several processes says so: its throughput is the job's, its MFU one rank's and its
    memory the fullest rank's, and the row read as a one-process run's (outside audit of the layouts)."""
    n = w.get("world_size")
    if w.get("source") == "stride train" and type(n) is int and n > 1:
        return f"{w['name']} ({n} ranks: throughput of all, MFU per rank, memory of the fullest)"
    return w["name"]


def _rows(results: dict[str, Any]) -> list[list[str]]:
    rows = []
    mixed = len({_at_median(w) for w in results["workloads"]}) > 1
    over = oversubscribed_entries(results)
    for w in results["workloads"]:
        t = w["throughput"]
        cv = spread_text(t)
        rows.append([_name_cell(w), f"{_fmt(t['median'], ',.0f')} {t['unit']}", cv,
                     _mfu_cell(w, mixed, over), f"{w['peak_mem_bytes'] / 2**20:,.0f} MiB",
                     _fmt(w.get("final_val_loss"), ".4f"), _ttt_cell(w)])
    return rows


def _table_notes(results: dict[str, Any]) -> list[str]:
    """What the results table's cells need said beside them."""
    note = host_mfu_note(results)
    return [note] if note else []


def ttt_lines(results: dict[str, Any]) -> list[str]:
    """One line per `--sweep ttt` workload: the median over every seed (a miss counted as never), the seeds that
    reached the target, and the misses (results.json's `time_to_target`, which the report never showed)."""
    from stride.bench.table import ttt_line

    return [ttt_line(base, r).strip() for base, r in ttt_groups(results).items()]


def _scaling_html(results: dict[str, Any]) -> str:
    rows = _scaling_rows(results)
    if not rows:
        return ""
    sc = results["scaling"]
    body = "".join(f"<tr>{''.join(f'<td>{_h(c)}</td>' for c in r)}</tr>" for r in rows)
    pins = "".join(f"<li>N={_h(n)}: {_h(d)}</li>" for n, d in (sc.get("pinning") or {}).items())
    return (f"<h2>Scaling</h2><table><tr>{''.join(f'<th>{_h(h)}</th>' for h in SCALING_HEAD)}</tr>{body}</table>"
            f"<p>{_h(sc.get('method', ''))}</p><ul>{pins}<li>load average (1 min) before / after: "
            f"{_h(sc.get('load_avg_1min'))}</li></ul>")


HEAD = ["workload", "throughput (median)", "cv (spread)", "MFU (at median)", "peak mem", "val loss",
        "time to target (s)"]


def _charts(results: dict[str, Any], results_dir: Path, notes: list[str]) -> list[str]:
    ws = results["workloads"]
    charts = [hbar_chart({w["name"]: {k: 1e3 * v for k, v in w["step_time_breakdown_s"].items()} for w in ws
                          if w["step_time_breakdown_s"]}, "step-time breakdown (mean of timed steps)",
                         "milliseconds per step")]
    charts += _variant_bars(results)
    raw = _loss_curves(results, results_dir, notes)
    if raw:
        smooth, smoothed = _smoothed(raw)
        title = "training loss against wall time" + (" (smoothed: EMA over n logged points; raw faint)" if smoothed
                                                      else "")
        charts.append(line_chart(smooth, title, "wall time since start (s)", "training loss (batch mean)",
                                 faint=dict(zip(smooth, raw.values(), strict=True)) if smoothed else None))
    batch, unit = _batch_curves(results)
    if batch:
        charts.append(line_chart(batch, "throughput against batch size", "batch size (samples per step, log2)",
                                 f"throughput ({unit})", x_log2=True, y_zero=True, markers=True))
    if results.get("scaling"):
        units = {p["throughput"]["unit"] for p in results["scaling"]["points"]}
        charts.append(line_chart(_scaling_curves(results, _efficiency), "scaling efficiency against world size "
                                 "(1 = ideal)", "world size (processes, log2)", "efficiency (fraction of ideal)",
                                 x_log2=True, y_zero=True, y_range=(0.0, 1.0), markers=True, reference=1.0))
        charts.append(line_chart(_scaling_curves(results, _throughput), "throughput against world size",
                                 "world size (processes, log2)", f"global throughput ({' / '.join(sorted(units))})",
                                 x_log2=True, y_zero=True, markers=True))
    return charts


def _cost_text(r: dict[str, Any]) -> str:
    """The cost sentence, with only the figures that exist; a missing price is said in words, and so is a cost to
    target that cannot be computed where the run had a target (missed: it was left out without a word)."""
    if r["usd_per_million_samples"] is None:
        if r.get("usd_per_hour") is not None:  # priced, but nothing was measured
            return "Cost: not computed (no throughput measured)"
        return f"Cost: not computed (no price for this machine in the price table: {r['price_key']})"
    if r.get("usd_per_hour") == 0:  # 0.0000 USD would read as free
        return f"Cost: not counted (the price table gives {r['price_key']} 0 USD an hour)"
    n = r.get("devices_priced")
    key = f"{r['price_key']} x {n} GPU{'s' if n != 1 else ''}" if n else r["price_key"]
    # per million of what the throughput counts (tokens/s: tokens, env steps/s: env steps), which the cost is of
    parts = [f"{r['usd_per_million_samples']:.4f} USD per million {r.get('cost_unit') or 'samples'} ({key})"]
    note = r.get("to_target_note")
    if r["usd_per_run_to_target"] is not None:
        lost = r.get("lost_time_s") or 0.0
        # a seed group's time to target is a statistic over the seeds: which one, said
        said = [f"{r['time_to_target_s']:.1f} s to target, {note}"] if note and r.get("time_to_target_s") else []
        said += [f"with {lost:.1f} s that restarts trained again"] if lost else []
        parts.append(f"{r['usd_per_run_to_target']:.4f} USD per run to target" + (f" ({'; '.join(said)})"
                                                                                   if said else ""))
    elif note:
        parts.append(f"per run to target: {note}")
    return "Cost: " + ", ".join(parts)


def _measured_text(r: dict[str, Any]) -> str:
    """"fastest of N" only where there was a choice; a single configuration is just what was measured; seeds of one
    configuration are seeds (they were called configurations and the fastest seed chosen)."""
    if r.get("seeds"):
        lo_hi = r.get("throughput_range")
        span = f" (seeds from {lo_hi[0]:,.0f} to {lo_hi[1]:,.0f})" if lo_hi else ""
        text = (f"one configuration over {r['seeds']} seeds: median {r['throughput']:,.0f} {r['unit']} across the "
                f"seeds{span}; the median seed {r['fastest']} stands for it")
    else:
        n = r.get("configurations", 2)
        what = f"fastest of {n} configurations" if n > 1 else "one configuration measured"
        text = f"{what}: {r['fastest']} at {r['throughput']:,.0f} {r['unit']}"
    left = r.get("not_ranked") or {}
    if left:
        text += "; not ranked: " + ", ".join(f"{k} ({v})" for k, v in left.items())
    return text


TTT_NOTE = ("Time to target over seeds: the median over every seed, a miss counted as never (not reached where half "
            "or more missed), beside the median, min and max of the seeds that reached it; the cost per run to target "
            "is priced at the median over every seed.")


class SweepFolderError(ValueError):
    """`stride report` of a `stride sweep` folder: its report.html and summary.md are the sweep's own."""


def refuse_sweep_folder(source: str | Path) -> None:
    """SweepFolderError when the report would go into a `stride sweep` folder (sweep.json, or a results.json of suite
    "sweep"): its report.html and summary.md (seed-level pairs, plots, cost) were replaced by a bench-style table
    of `sweep:<id>` workloads without a word (audit 10, F5). Nothing is written."""
    from stride.files.folder_kind import what_it_holds

    p = Path(source)
    folder = p if p.is_dir() else p.parent
    held = [h for h in what_it_holds(folder) if h.kind == "sweep"]
    if held:
        raise SweepFolderError(
            f"{folder} is a `stride sweep` folder ({held[0].evidence}): its report.html and summary.md are the "
            f"sweep's own and are left as they are; run the same `stride sweep ... --out {folder}` command again to "
            "rewrite them (it trains nothing already finished), or `stride compare` to compare it with other results")


def render_report(source: str | Path, prices: dict[str, float],
                  note: Callable[[str], None] | None = None) -> tuple[Path, Path]:
    """report.html and summary.md for `source` (a results.json, a bench directory or a training run
    directory), written beside it; a sweep's folder is refused (`refuse_sweep_folder`). What was left out (a loss
    curve whose run folder is outside the results folder or unreadable) is said in both files and to `note`.

    Every value from the input goes into the page through `html.escape` and into summary.md through `md_cell`: the
    input is someone's file, and a `<script>` in it must stay text (outside audit 14, H2, L7)."""
    refuse_sweep_folder(source)
    results, d = resolve(source)
    notes: list[str] = []
    charts = _charts(results, d, notes)
    for n in notes if note is not None else ():
        note(n)
    recs, advice, rows = recommend(results, prices), scaling_advice(results), _rows(results)  # once, for both files
    env = results["environment"]
    head = _head(results)
    tnotes, ttts = _table_notes(results), ttt_lines(results)
    tnotes_html = "".join(f"<p>{_h(n)}</p>" for n in tnotes)
    ttt_html = (f"<h2>Time to target</h2><ul>{''.join(f'<li>{_h(t)}</li>' for t in ttts)}</ul><p>{_h(TTT_NOTE)}</p>"
                if ttts else "")
    table = "".join(f"<tr>{''.join(f'<td>{_h(c)}</td>' for c in r)}</tr>" for r in rows)
    rec_html = "".join(
        f"<li><b>{_h(r['workload'])}</b>: {_h(_measured_text(r))}; bottleneck "
        f"<b>{_h(r['bottleneck'])}</b>: {_h(r['advice'])}. {_h(_cost_text(r))}.</li>" for r in recs)
    rec_html += "".join(
        f"<li><b>{_h(a['workload'])}</b> {_h(a['strategy'])} {_h(a['scaling'])} scaling at "
        f"{_h(a['world_size'])} ranks: efficiency {a['efficiency']:.2f}, <b>{_h(a['verdict'])}</b>: "
        f"{_h(a['advice'])}.</li>" for a in advice)
    partial = results.get("partial")  # checked by the schema: counts and names (stride.bench.results)
    stopped = (f"<p><b>Partial results</b>: the sweep was stopped after {_h(partial['done'])} of "
               f"{_h(partial['planned'])} runs (not measured: {_h(', '.join(partial['pending']))}); "
               "rerun it with the same --out to finish.</p>" if partial else "")
    left_out = (f"<p><b>Left out</b>:</p><ul>{''.join(f'<li>{_h(n)}</li>' for n in notes)}</ul>" if notes
                else "")
    html = f"""<!doctype html><html><head><meta charset="utf-8"><title>stride report</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}
td,th{{padding:4px 8px;border-bottom:1px solid #ddd}}
table{{border-collapse:collapse}}svg{{margin:8px;border:1px solid #eee;max-width:100%;height:auto}}</style></head>
<body>
<h1>stride report: {_h(results['suite'])} suite</h1>
<p>Machine: {_h(env.get('cpu_model'))}; GPUs: {_h(_gpus(env))};
torch {_h(_torch(env))}; commit {_h(str(env.get('git_commit'))[:12])}.</p>
{stopped}<h2>Results</h2><table><tr>{''.join(f'<th>{_h(h)}</th>' for h in head)}</tr>{table}</table>
<p>Throughput: median over equal windows of steps after warm-up, with min/max and coefficient of variation
("1 run": a single measurement, no spread).</p>
{tnotes_html}{ttt_html}{_scaling_html(results)}
<h2>Recommendations</h2><ul>{rec_html}</ul>
<h2>Plots</h2>{left_out}{''.join(charts)}
</body></html>
"""
    m = md_cell  # every value from the input: no raw HTML, no link, no `|` that splits a table row
    md = [f"# stride report: {m(results['suite'])} suite", ""]
    if partial:
        md += [f"Partial results: stopped after {m(partial['done'])} of {m(partial['planned'])} runs.", ""]
    md += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    md += ["| " + " | ".join(map(m, r)) + " |" for r in rows]
    md += [""] + [m(n) for n in tnotes] if tnotes else []
    if ttts:
        md += ["", "## Time to target", "", *(f"- {m(t)}" for t in ttts), "", m(TTT_NOTE)]
    srows = _scaling_rows(results)
    if srows:
        sc = results["scaling"]
        md += ["", "## Scaling", "", m(sc.get("method", "")), "",
               "| " + " | ".join(SCALING_HEAD) + " |", "|" + "---|" * len(SCALING_HEAD)]
        md += ["| " + " | ".join(map(m, r)) + " |" for r in srows]
        md += [""] + [f"- N={m(n)}: {m(d)}" for n, d in (sc.get("pinning") or {}).items()]
        md += [f"- load average (1 min) before / after: {m(sc.get('load_avg_1min'))}"]
    md += ["", "## Recommendations", ""]
    md += [f"- **{m(r['workload'])}**: {m(_measured_text(r))}; bottleneck {m(r['bottleneck'])}: {m(r['advice'])}; "
           f"{m(_cost_text(r))}" for r in recs]
    md += [f"- **{m(a['workload'])}** {m(a['strategy'])} {m(a['scaling'])} scaling at {m(a['world_size'])} ranks: "
           f"efficiency {a['efficiency']:.2f}, {m(a['verdict'])}: {m(a['advice'])}" for a in advice]
    if notes:
        md += ["", "## Left out", "", *(f"- {m(n)}" for n in notes)]
    html_path, md_path = d / "report.html", d / "summary.md"
    atomic_write_text(html_path, html)
    atomic_write_text(md_path, "\n".join(md) + "\n")
    return html_path, md_path
