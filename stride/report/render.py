"""`report.html` (self-contained, plots inline) and `summary.md` from a results directory."""

from __future__ import annotations

import json
from collections.abc import Callable
from html import escape
from pathlib import Path
from typing import Any

from stride.bench.results import load_results
from stride.metrics.run_dir import atomic_write_text
from stride.report.recommend import recommend, scaling_advice
from stride.report.svg import line_chart, stacked_bars


def _loss_curves(results: dict[str, Any]) -> dict[str, list[tuple[float, float]]]:
    curves = {}
    for w in results["workloads"]:
        path = Path(w["run_dir"]) / "metrics.jsonl" if w.get("run_dir") else None
        if path is None or not path.is_file():
            continue
        pts = []
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a crash can leave the last line cut; the rest is still good
            if "loss" in rec:
                pts.append((rec["time_s"], rec["loss"]))
        if pts:
            curves[w["name"]] = pts
    return curves


def _batch_curves(results: dict[str, Any]) -> dict[str, list[tuple[float, float]]]:
    curves: dict[str, list[tuple[float, float]]] = {}
    for w in results["workloads"]:
        bs = w.get("config", {}).get("train", {}).get("batch_size")
        if bs and w["throughput"]["median"]:
            curves.setdefault(w["name"].split("+")[0], []).append((bs, w["throughput"]["median"]))
    return {k: sorted(v) for k, v in curves.items() if len(v) > 1}


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


def _rows(results: dict[str, Any]) -> list[list[str]]:
    rows = []
    for w in results["workloads"]:
        t = w["throughput"]
        cv = _fmt(t["cv"] and 100 * t["cv"], ".1f") + "%"
        rows.append([w["name"], f"{_fmt(t['median'], ',.0f')} {t['unit']}", cv,
                     _fmt(w["mfu"] and 100 * w["mfu"], ".1f") + "%", f"{w['peak_mem_bytes'] / 2**20:,.0f} MiB",
                     _fmt(w.get("final_val_loss"), ".4f"), _fmt(w.get("time_to_target_s"), ".1f")])
    return rows


def _scaling_html(results: dict[str, Any]) -> str:
    rows = _scaling_rows(results)
    if not rows:
        return ""
    sc = results["scaling"]
    body = "".join(f"<tr>{''.join(f'<td>{escape(c)}</td>' for c in r)}</tr>" for r in rows)
    pins = "".join(f"<li>N={escape(str(n))}: {escape(str(d))}</li>" for n, d in (sc.get("pinning") or {}).items())
    return (f"<h2>Scaling</h2><table><tr>{''.join(f'<th>{escape(h)}</th>' for h in SCALING_HEAD)}</tr>{body}</table>"
            f"<p>{escape(sc.get('method', ''))}</p><ul>{pins}<li>load average (1 min) before / after: "
            f"{escape(str(sc.get('load_avg_1min')))}</li></ul>")


HEAD = ["workload", "throughput (median)", "cv", "MFU", "peak mem", "val loss", "time to target (s)"]


def render_report(results_dir: str | Path, prices: dict[str, float]) -> tuple[Path, Path]:
    d = Path(results_dir)
    results = load_results(d / "results.json")
    recs = recommend(results, prices)
    charts = [
        stacked_bars({w["name"]: w["step_time_breakdown_s"] for w in results["workloads"]},
                     "step-time breakdown", "seconds per step"),
        line_chart(_loss_curves(results), "training loss against wall time", "seconds", "loss"),
    ]
    batch = _batch_curves(results)
    if batch:
        charts.append(line_chart(batch, "throughput against batch size", "batch size", "samples/s"))
    scaling = results.get("scaling")
    if scaling:
        charts.append(line_chart(_scaling_curves(results, _efficiency), "scaling efficiency (1 = ideal)",
                                 "processes", "efficiency", y_range=(0.0, 1.0), markers=True, reference=1.0))
        charts.append(line_chart(_scaling_curves(results, _throughput), "throughput against processes",
                                 "processes", "throughput", y_range=(0.0, 0.0), markers=True))
    env = results["environment"]
    table = "".join(f"<tr>{''.join(f'<td>{escape(c)}</td>' for c in r)}</tr>" for r in _rows(results))
    rec_html = "".join(
        f"<li><b>{escape(r['workload'])}</b>: fastest <code>{escape(r['fastest'])}</code> at "
        f"{r['throughput']:,.0f} {escape(r['unit'])}; bottleneck <b>{escape(r['bottleneck'])}</b>: "
        f"{escape(r['advice'])}. Cost: {_fmt(r['usd_per_million_samples'], '.4f')} USD per million samples"
        f" ({escape(r['price_key'])}), {_fmt(r['usd_per_run_to_target'], '.4f')} USD per run to target.</li>"
        for r in recs
    )
    rec_html += "".join(
        f"<li><b>{escape(a['workload'])}</b> {escape(a['strategy'])} {escape(a['scaling'])} scaling at "
        f"{a['world_size']} ranks: efficiency {a['efficiency']:.2f}, <b>{escape(a['verdict'])}</b>: "
        f"{escape(a['advice'])}.</li>" for a in scaling_advice(results))
    html = f"""<!doctype html><html><head><meta charset="utf-8"><title>stride report</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}
td,th{{padding:4px 8px;border-bottom:1px solid #ddd}}
table{{border-collapse:collapse}}svg{{margin:8px;border:1px solid #eee}}</style></head><body>
<h1>stride report: {escape(results['suite'])} suite</h1>
<p>Machine: {escape(str(env.get('cpu_model')))}; GPUs: {escape(', '.join(env.get('gpus') or []) or 'none')};
torch {escape(str(env.get('packages', {}).get('torch')))}; commit {escape(str(env.get('git_commit'))[:12])}.</p>
<h2>Results</h2><table><tr>{''.join(f'<th>{h}</th>' for h in HEAD)}</tr>{table}</table>
<p>Throughput: median over equal windows of steps after warm-up, with min/max and coefficient of variation.</p>
{_scaling_html(results)}
<h2>Recommendations</h2><ul>{rec_html}</ul>
<h2>Plots</h2>{''.join(charts)}
</body></html>
"""
    md = [f"# stride report: {results['suite']} suite", "", "| " + " | ".join(HEAD) + " |",
          "|" + "---|" * len(HEAD)]
    md += ["| " + " | ".join(r) + " |" for r in _rows(results)]
    srows = _scaling_rows(results)
    if srows:
        sc = results["scaling"]
        md += ["", "## Scaling", "", sc.get("method", ""), "",
               "| " + " | ".join(SCALING_HEAD) + " |", "|" + "---|" * len(SCALING_HEAD)]
        md += ["| " + " | ".join(r) + " |" for r in srows]
        md += [""] + [f"- N={n}: {d}" for n, d in (sc.get("pinning") or {}).items()]
        md += [f"- load average (1 min) before / after: {sc.get('load_avg_1min')}"]
    md += ["", "## Recommendations", ""]
    md += [f"- **{r['workload']}**: fastest `{r['fastest']}`; bottleneck {r['bottleneck']}: {r['advice']}; "
           f"{_fmt(r['usd_per_million_samples'], '.4f')} USD per million samples" for r in recs]
    md += [f"- **{a['workload']}** {a['strategy']} {a['scaling']} scaling at {a['world_size']} ranks: efficiency "
           f"{a['efficiency']:.2f}, {a['verdict']}: {a['advice']}" for a in scaling_advice(results)]
    html_path, md_path = d / "report.html", d / "summary.md"
    atomic_write_text(html_path, html)
    atomic_write_text(md_path, "\n".join(md) + "\n")
    return html_path, md_path
