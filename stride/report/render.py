"""`report.html` (self-contained, plots inline) and `summary.md` from a results directory."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

from stride.bench.results import load_results
from stride.metrics.run_dir import atomic_write_text
from stride.report.recommend import recommend
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


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _rows(results: dict[str, Any]) -> list[list[str]]:
    rows = []
    for w in results["workloads"]:
        t = w["throughput"]
        cv = _fmt(t["cv"] and 100 * t["cv"], ".1f") + "%"
        rows.append([w["name"], f"{_fmt(t['median'], ',.0f')} {t['unit']}", cv,
                     _fmt(w["mfu"] and 100 * w["mfu"], ".1f") + "%", f"{w['peak_mem_bytes'] / 2**20:,.0f} MiB",
                     _fmt(w.get("final_val_loss"), ".4f"), _fmt(w.get("time_to_target_s"), ".1f")])
    return rows


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
        charts.append(line_chart({k: [tuple(p) for p in v] for k, v in scaling.items()},
                                 "scaling efficiency", "processes", "efficiency"))
    env = results["environment"]
    table = "".join(f"<tr>{''.join(f'<td>{escape(c)}</td>' for c in r)}</tr>" for r in _rows(results))
    rec_html = "".join(
        f"<li><b>{escape(r['workload'])}</b>: fastest <code>{escape(r['fastest'])}</code> at "
        f"{r['throughput']:,.0f} {escape(r['unit'])}; bottleneck <b>{escape(r['bottleneck'])}</b>: "
        f"{escape(r['advice'])}. Cost: {_fmt(r['usd_per_million_samples'], '.4f')} USD per million samples"
        f" ({escape(r['price_key'])}), {_fmt(r['usd_per_run_to_target'], '.4f')} USD per run to target.</li>"
        for r in recs
    )
    html = f"""<!doctype html><html><head><meta charset="utf-8"><title>stride report</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}
td,th{{padding:4px 8px;border-bottom:1px solid #ddd}}
table{{border-collapse:collapse}}svg{{margin:8px;border:1px solid #eee}}</style></head><body>
<h1>stride report: {escape(results['suite'])} suite</h1>
<p>Machine: {escape(str(env.get('cpu_model')))}; GPUs: {escape(', '.join(env.get('gpus') or []) or 'none')};
torch {escape(str(env.get('packages', {}).get('torch')))}; commit {escape(str(env.get('git_commit'))[:12])}.</p>
<h2>Results</h2><table><tr>{''.join(f'<th>{h}</th>' for h in HEAD)}</tr>{table}</table>
<p>Throughput: median over equal windows of steps after warm-up, with min/max and coefficient of variation.</p>
<h2>Recommendations</h2><ul>{rec_html}</ul>
<h2>Plots</h2>{''.join(charts)}
</body></html>
"""
    md = [f"# stride report: {results['suite']} suite", "", "| " + " | ".join(HEAD) + " |",
          "|" + "---|" * len(HEAD)]
    md += ["| " + " | ".join(r) + " |" for r in _rows(results)]
    md += ["", "## Recommendations", ""]
    md += [f"- **{r['workload']}**: fastest `{r['fastest']}`; bottleneck {r['bottleneck']}: {r['advice']}; "
           f"{_fmt(r['usd_per_million_samples'], '.4f')} USD per million samples" for r in recs]
    html_path, md_path = d / "report.html", d / "summary.md"
    atomic_write_text(html_path, html)
    atomic_write_text(md_path, "\n".join(md) + "\n")
    return html_path, md_path
