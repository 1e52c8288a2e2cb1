"""Compare two sets of results workload by workload, against the spread each side measured."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from rich.table import Table

from stride.bench.stats import one_run
from stride.config.errors import first_few
from stride.files.strict_json import finite_number
from stride.metrics.contention import entry_contention
from stride.report.contended import contended_verdict
from stride.shown_text import literal, plain

# What defines a workload (`section.key` of the config; `model.*`: the whole model table), with `world_size`
# (processes): the model, what one sample holds, the global batch. What is not listed is what compare is for:
# precision, compile, kernels, activation checkpointing, grad_accum, the optimizer and its implementation
# (bench's tradeoff variants), the parallel layout at one process count, the loader's settings, the device and
# machine, and what does not change a step's work (steps, seeds, a synthetic market's length and asset count).
# `data.store` is not among them: a store is named by its path, which is not what it holds (a relative path in one
# run and an absolute one in the other, or the same data on another machine, would refuse one workload); what a
# sample holds is `data.columns`, `seq_len` and `horizons`.
WORKLOAD_KEYS = ("model.*", "data.source", "data.kwargs", "data.columns", "data.seq_len", "data.horizons",
                 "train.batch_size")
# "parallel layout" alone read as an invitation to compare a 1-rank run with a 2-rank one, which the same message
# refuses (the process count is the workload's: docs/bench.md)
UNDER_TEST = ("precision, compile, kernels, activation checkpointing, grad_accum, optimizer, parallel layout at one "
              "process count, machine")


def mismatch_message(rows: list[dict[str, Any]]) -> str | None:
    """The refusal of every row whose two sides are different workloads, versions of one or are measured in different
    units (None where there is none): each of these exits 2, so a CI gate on compare's status fails on them."""
    keys = ("workload_mismatch", "version_mismatch", "unit_mismatch")
    bad = [next(r[k] for k in keys if r.get(k)) for r in rows if any(r.get(k) for k in keys)]
    return "; ".join(bad) if bad else None


# Each side's measured spread is the CV of its throughput measurements: for a `stride bench` entry the 3 windows of
# one run (within-run jitter), for a `stride train` run folder the robust spread of the timed steps its metrics.jsonl
# logged (stride.bench.stats.run_step_rates and step_cv; none where that file is missing or damaged), for a world
# sweep point its repeated runs (with --repeats 1, its timed steps, as a run folder). The ratio of the two medians
# carries the noise of both sides, so their CVs add in quadrature (the relative sd of a ratio of independent figures);
# the band is two of those sds, at least 2 %. Windows of one run share its conditions (load, clocks, caches), so their
# spread can understate what a second run differs by; that is why the band is not narrowed by the count of windows
# (sd/sqrt(n)), and why the docs and --help call it the measured spread, not run-to-run noise.
BAND_FLOOR = 0.02


def noise_band(a: dict[str, Any], b: dict[str, Any]) -> float:
    """Relative change of B/A that each side's measured spread can explain: 2 x sqrt(cv_A^2 + cv_B^2), >= 2 %."""
    return max(2 * math.hypot(a.get("cv") or 0.0, b.get("cv") or 0.0), BAND_FLOOR)


def within_band(ratio: float, band: float) -> bool:
    """|ratio - 1| <= band, both to 12 decimals: far below any measurement, and a figure `shown` can print, so the
    table's digits always agree with the verdict (to the last bit, 1 - 0.9779 > 0.0221 would say "slower")."""
    return round(abs(ratio - 1), 12) <= round(band, 12)


def noise_measured(t: dict[str, Any]) -> bool:
    """Whether a throughput carries its own spread: repeats with a CV, not one run (a run folder's one figure)."""
    return t.get("cv") is not None and not one_run(t)


def judge(a: dict[str, Any], b: dict[str, Any]) -> tuple[float | None, str]:
    """(ratio b/a of median throughput, verdict) where verdict is faster / slower / within noise.

    The band alone decides, so the verdict follows from the two numbers the table prints. An earlier rule also
    called any pair whose [min, max] ranges touched "within noise", which read "within noise" for 1.200 against a
    printed ±10 % band. A min or max is one window, so one outlier window decided; the CVs the band is made of
    already hold that spread."""
    if not a.get("median") or not b.get("median"):
        return None, "n/a"
    ratio = b["median"] / a["median"]
    if not math.isfinite(ratio) or ratio == 0:  # a median of 1e-310 (inputs check each figure's range, not this)
        from stride.bench.results import ResultsError

        raise ResultsError(f"throughput.median B / A = {b['median']!r} / {a['median']!r} is not a finite, positive "
                           "ratio: one of them is no measurement (a damaged or edited file)")
    unmeasured = "" if noise_measured(a) or noise_measured(b) else " (noise not measured: 1 run each, 2 % assumed)"
    if within_band(ratio, noise_band(a, b)):
        return ratio, "within noise" + unmeasured
    return ratio, ("faster" if ratio > 1 else "slower") + unmeasured


def workload_differences(wa: dict[str, Any], wb: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, A's value, B's value) for each WORKLOAD_KEYS setting and process count the two entries differ in.
    A key a config leaves out has its default (config.toml omits None values); an entry without a config
    (a results file written by hand) or a process count is not checked on that account."""
    from stride.config import RunConfig, config_to_dict

    defaults = config_to_dict(RunConfig())
    configs = [w.get("config") for w in (wa, wb)]
    diffs: list[tuple[str, Any, Any]] = []
    if all(isinstance(c, dict) and c for c in configs):
        for dotted in WORKLOAD_KEYS:
            sec, key = dotted.split(".")
            for k in defaults[sec] if key == "*" else [key]:
                va, vb = (_setting(c, sec, k, defaults) for c in configs)
                if va != vb:
                    diffs.append((f"{sec}.{k}", va, vb))
    na, nb = wa.get("world_size"), wb.get("world_size")
    if na is not None and nb is not None and na != nb:
        diffs.append(("world_size", na, nb))
    return diffs


def unchecked_workload(wa: dict[str, Any], wb: dict[str, Any]) -> str | None:
    """Which side has no `config` to check the workload with (None: both have one). Without it WORKLOAD_KEYS are
    not compared, and batch 256 against 128 read "within noise" without a word."""
    missing = [side for side, w in (("A", wa), ("B", wb)) if not (isinstance(w.get("config"), dict) and w["config"])]
    if not missing:
        return None
    return (f"{' and '.join(missing)} {'has' if len(missing) == 1 else 'have'} no config, so the batch size, model and "
            "data were not compared")


def _setting(cfg: dict[str, Any], sec: str, key: str, defaults: dict[str, Any]) -> Any:
    table = cfg.get(sec)
    return table.get(key, defaults[sec][key]) if isinstance(table, dict) else defaults[sec][key]


def _row(wa: dict[str, Any], wb: dict[str, Any], name: str) -> dict[str, Any]:
    """One row; a pair that is not one workload, one version of it, or one unit gets no ratio and says why. The
    workload comes first: an MLP bench entry against a transformer run is two workloads, not a version question."""
    if diffs := workload_differences(wa, wb):  # this row gets no verdict; the others still do (the CLI exits 2)
        why = (f"{name}: A and B are different workloads, so no verdict: "
               + ", ".join(f"{k} {a!r} vs {b!r}" for k, a, b in diffs)
               + f"; compare runs of one workload that differ in what is under test ({UNDER_TEST})")
        return {"name": name, "ratio": None, "a_median": wa["throughput"]["median"],
                "b_median": wb["throughput"]["median"], "verdict": "different workloads: not comparable",
                "workload_mismatch": why}
    va, vb = wa.get("version"), wb.get("version")
    if va != vb:  # a version bump changed the workload's definition (steps, windows...): no verdict, exit 2
        def said(v: Any) -> str:
            if v is None:
                return "no version (a `stride train` run or a hand-written entry)"
            # "3" against 3 read as two versions with no word of why
            return f"version {v!r} (text, not a number)" if isinstance(v, str) else f"version {v!r}"

        return {"name": name, "ratio": None, "a_median": wa["throughput"]["median"],
                "b_median": wb["throughput"]["median"], "verdict": f"versions differ ({va} vs {vb}): not comparable",
                "version_mismatch": f"{name}: workload versions differ: A has {said(va)}, B has {said(vb)}; a version "
                                    "changes what the workload measures, so no ratio (measure both with one version)"}
    ua, ub = wa["throughput"]["unit"], wb["throughput"]["unit"]
    if ua != ub:  # "timesteps/s" against "samples/s" was judged 1.000 "within noise"; no safe conversion is known
        return {"name": name, "ratio": None, "a_median": wa["throughput"]["median"],
                "b_median": wb["throughput"]["median"], "verdict": "units differ: not comparable",
                "unit_mismatch": f"{name}: throughput units differ: A in {ua!r}, B in {ub!r}; stride knows no "
                                 "conversion between them, so no ratio (compare results measured in one unit)"}
    try:
        ratio, verdict = judge(wa["throughput"], wb["throughput"])
    except ValueError as exc:  # a ResultsError: which workload
        raise type(exc)(f"workload {name}: {exc}") from None
    # a side measured on a contended host: its figure can be tens of times slow at any spread (a train run's one
    # figure was judged "slower" against the 2 % floor), so the ratio is shown and judged by no band
    busy = contended_verdict({"A": wa, "B": wb})
    mem = wb["peak_mem_bytes"] / wa["peak_mem_bytes"] if wa.get("peak_mem_bytes") and wb.get("peak_mem_bytes") else None
    return {"name": name, "ratio": ratio, "verdict": busy if busy and ratio is not None else verdict,
            # a ratio of possibly two workloads: said under the table and in --json (the verdict's text is kept)
            "workload_unchecked": unchecked_workload(wa, wb),
            "mem_ratio": mem, "unit": wa["throughput"]["unit"],
            "a_median": wa["throughput"]["median"], "b_median": wb["throughput"]["median"],
            "noise_band": noise_band(wa["throughput"], wb["throughput"]),
            "noise_measured": noise_measured(wa["throughput"]) or noise_measured(wb["throughput"]),
            "peak_note": peak_note(wa, wb),
            # the runs' own notes, whose threads waited and what to do: for --json and the table's caption
            "contention_notes": {side: note for side, w in (("A", wa), ("B", wb)) if (note := entry_contention(w))},
            # a run folder whose metrics.jsonl gave no spread (missing, damaged, too few steps): why its side is one
            # figure, judged against the assumed floor
            "spread_notes": {side: w["spread_note"] for side, w in (("A", wa), ("B", wb)) if w.get("spread_note")},
            # both figures of one run each (`runs` 1: a run folder, a bench entry's windows, a world point of
            # --repeats 1): the band holds each run's own spread, not the drift between runs (ONE_RUN_NOTE)
            "one_run_each": wa.get("runs") == 1 and wb.get("runs") == 1}


# What a band of one run each leaves out, said under the table: the helper's world-sweep audit (session 36, AMD EPYC
# family 26 model 2, 2 cores, shared) compared every pair of 8 identical one-run mlp_tiny points; with each point's
# timed-step spread as its band, 21 of 28 one-rank pairs and 3 of 28 two-rank pairs still read faster or slower
# (0.72-1.40x): the load moved between the runs, which no run's own steps show (docs/bench.md, world sweep).
ONE_RUN_NOTE = ("{names}: one run each side: the noise band is the spread within each run (its timed steps or "
                "windows), which holds no drift between runs (another load, other clocks); identical one-run points "
                "on a shared 2-core host read as different in up to 21 of 28 pairs (docs/bench.md). Repeated runs "
                "(a world sweep's --repeats 3) measure it")


PEAK_DIFF = 0.05  # MFU peaks of the two sides further apart than this are said


def _positive(v: Any) -> float | None:
    return float(v) if finite_number(v) and v > 0 else None


def peak_note(wa: dict[str, Any], wb: dict[str, Any]) -> str | None:
    """What to say where the two sides' MFUs divide by peaks more than PEAK_DIFF apart (None: alike, or unknown).

    On a CPU the peak is cores x clock x FLOPs a cycle, and a clock read off a GEMM rises from run to run on one host
    (2.75 -> 3.53 GHz over ten runs, outside audit 13, L5): two MFUs of one FLOP/s then differ by the clocks' ratio.
    The throughput ratio is not affected; MFUs side by side are."""
    pa, pb = _positive(wa.get("peak_flops_per_s")), _positive(wb.get("peak_flops_per_s"))
    if pa is None or pb is None or abs(pb / pa - 1) <= PEAK_DIFF:
        return None
    ca, cb = _positive(wa.get("peak_clock_ghz")), _positive(wb.get("peak_clock_ghz"))
    why = (f"CPU clock {ca:.2f} vs {cb:.2f} GHz" if ca and cb and round(ca, 2) != round(cb, 2)
           else f"A: {wa.get('mfu_peak_source')}; B: {wb.get('mfu_peak_source')}")
    return (f"the MFU peaks differ by {100 * (pb / pa - 1):+.0f}% (A {pa:.3g}, B {pb:.3g} FLOP/s; {why}): each "
            "side's MFU divides by its own peak, so their MFUs are not comparable as measured (the throughput ratio "
            "is); metrics.peak_flops sets one peak for both")


def compare_results(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per workload name in A or B; a workload measured on one side only says so (no median for
    the other side). Two single-workload inputs (e.g. two training runs) are compared whatever their names.
    A pair that differs in what defines the workload (WORKLOAD_KEYS) gets no verdict: its row says why
    (`workload_mismatch`), and `mismatch_message` gathers those."""
    wa_all, wb_all = a["workloads"], b["workloads"]
    if len(wa_all) == 1 and len(wb_all) == 1 and wa_all[0]["name"] != wb_all[0]["name"]:
        return [_row(wa_all[0], wb_all[0], f"{wa_all[0]['name']} vs {wb_all[0]['name']}")]
    by_name = {w["name"]: w for w in wb_all}
    rows = []
    for wa in wa_all:
        wb = by_name.get(wa["name"])
        if wb is None:
            rows.append({"name": wa["name"], "ratio": None, "verdict": "missing in B",
                         "a_median": wa["throughput"]["median"], "b_median": None, "missing": "B"})
        else:
            rows.append(_row(wa, wb, wa["name"]))
    names_a = {w["name"] for w in wa_all}
    rows += [{"name": n, "ratio": None, "verdict": "missing in A", "a_median": None,
              "b_median": w["throughput"]["median"], "missing": "A"} for n, w in by_name.items() if n not in names_a]
    return rows


def statistic(results: dict[str, Any]) -> str:
    """What a side's throughput figures are: a `stride train` run's is its samples over its timed steps (a mean, one
    measurement), a bench entry's the median of its windows (a run folder's figure was headed "median")."""
    runs = all(w.get("source") == "stride train" for w in results["workloads"])
    return "over timed steps" if runs else "median"


def compare_table(rows: list[dict[str, Any]], a_label: str = "A", b_label: str = "B", a_stat: str = "median",
                  b_stat: str = "median") -> Table:
    """The rows as a rich table; a side that did not measure a workload reads "not measured", never 0. Names,
    verdicts (which quote config values) and notes come from the two inputs: Text cells, shown as written.
    `a_stat`, `b_stat`: what each side's figure is (`statistic`), in its column's heading."""
    table = Table(title=literal(f"stride compare: B / A  (A = {a_label}, B = {b_label})"))
    for col in ("workload", f"A {a_stat}", f"B {b_stat}", "B/A throughput", "noise band", "B/A memory", "verdict"):
        table.add_column(col, justify="left" if col in ("workload", "verdict") else "right")

    def med(r: dict[str, Any], side: str) -> str:
        v = r.get(f"{side}_median")
        if r.get("missing") == side.upper():
            return "not measured"
        return "-" if v is None else number(v)

    for r in rows:
        ratio, band = shown(r)
        table.add_row(literal(r["name"]), med(r, "a"), med(r, "b"), ratio, band,
                      f"{r['mem_ratio']:.3f}" if r.get("mem_ratio") else "-", literal(r["verdict"]))
    notes = [f"{r['name']}: workload not checked: {r['workload_unchecked']}; the verdict is of two throughputs that "
             "may be of different workloads" for r in rows if r.get("workload_unchecked")]
    notes += [f"{r['name']}: {r['peak_note']}" for r in rows if r.get("peak_note")]
    notes += [f"{r['name']}: {side}: {note}" for r in rows for side, note in (r.get("contention_notes") or {}).items()]
    notes += [f"{r['name']}: {side}: one figure, no spread measured: {note}" for r in rows
              for side, note in (r.get("spread_notes") or {}).items()]
    judged = [r["name"] for r in rows if r.get("one_run_each") and r.get("ratio") is not None
              and str(r.get("verdict", "")).startswith(("faster", "slower", "within noise"))]
    if judged:
        notes.append(ONE_RUN_NOTE.format(names=first_few(judged, 3)))
    if notes:
        table.caption = literal("\n".join(map(plain, notes)), lines=True)  # one line a note
    return table


def number(v: float) -> str:
    """A median as the table prints it: whole units with thousands separators up to 1e9, scientific beyond (a
    damaged file's 1e308 was printed as a 309-digit integer)."""
    return f"{v:,.0f}" if 1 <= abs(v) < 1e9 or v == 0 else f"{v:.3g}" if abs(v) < 1 else f"{v:.3e}"


def shown(r: dict[str, Any]) -> tuple[str, str]:
    """(ratio, band) as the table prints them, to one precision (ratio 0.001 with the band in 0.1 %), with more digits
    where those would contradict the verdict: 0.978 beside ±2.2 % reads as on the band's edge, yet 0.9779 is outside
    2.185 % ("slower": shown 0.9779 beside ±2.19 %). The verdict is judged on the exact figures (also in --json); the
    display follows it rather than the verdict following rounded figures, which would move with the display."""
    ratio, band = r.get("ratio"), r.get("noise_band")
    if not ratio:
        return "-", "-"
    if not band:
        return f"{ratio:.3f}" if 1e-3 <= ratio < 1e6 else f"{ratio:.3e}", "-"
    if not 1e-3 <= ratio < 1e6:  # far outside any band: the digits cannot contradict the verdict
        return f"{ratio:.3e}", f"±{100 * band:.1f}%" + ("" if r.get("noise_measured") else " assumed")
    within = within_band(ratio, band)
    for digits in range(3, 13):  # by 12 digits the shown figures are those within_band judged
        rt, bt = f"{ratio:.{digits}f}", f"{100 * band:.{digits - 2}f}"
        if (abs(Decimal(rt) - 1) <= Decimal(bt) / 100) == within:
            break
    return rt, f"±{bt}%" + ("" if r.get("noise_measured") else " assumed")
