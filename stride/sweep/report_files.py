"""Write the sweep report's files: table.parquet, results.json, report.html, summary.md (see report.py)."""

from __future__ import annotations

import math
from html import escape
from pathlib import Path
from typing import Any

from stride.bench.results import make_results
from stride.files import strict_json
from stride.metrics.contention import CONTENDED_THREADS, foreign_wait
from stride.metrics.env import fingerprint
from stride.metrics.run_dir import atomic_write_text
from stride.shown_text import md_cell
from stride.sweep.report import (
    SEED_KEYS,
    configuration_stats,
    pairwise,
    plots,
    seed_advice,
    seeds_text,
    significance_line,
    table_rows,
    write_parquet,
)
from stride.sweep.stats import BOOTSTRAP_MIN_SEEDS


def packed(pack: dict[str, Any]) -> bool:
    """Whether a packs.jsonl record trained models together: not `--pack 1`'s points one after another (`solo`), not
    a pack of one. Only these carry a packing speed-up; a lone point's is 1.00x of itself by construction."""
    return not pack.get("solo") and pack.get("size") != 1


def cost(results: list[dict[str, Any]], packs: list[dict[str, Any]], price_per_hour: float | None) -> dict[str, Any]:
    """Device time of the sweep's packs against the points' training time one by one (and dollars with a price).

    One by one: a point that ran alone is its measured training steps' time; a packed point is its steps at the solo
    throughput measured for its class (training steps only). The sweep: the wall times of the packs that
    finished (validation and set-up included; the probe and packs cut off by a kill are not counted), and
    their training steps alone (`sweep_train_s`, the like-for-like figure: `train_speedup`). The speed-ups, and the
    reasons they are unreliable, only where some finished pack trained models together (`packed_packs`): a sweep of
    lone points showed "1.00x ..., UNRELIABLE" when one of its lone runs waited for cores, a note on nothing.

    Both sides count the same points: those of the finished packs (`counted_ids`). A pack stopped by Ctrl-C, SIGTERM
    or a kill writes no record, but the members it had finished are kept as points: their one-by-one time was
    counted while their pack's time was not, and the rerun's packs held only the rest: `--grid train.steps=150,600
    --grid train.seed=0,1 --pack 4` killed (-9) after its 150-step members finished counted 1,500 model-steps one by
    one against a resumed pack that trained 1,200, a speed-up 1.25x too high by construction (more where the short
    members are nearly as long as the rest). They are counted out of both sides, and said (`points_outside_packs`).
    """
    done = [p for p in packs if not p.get("error")]
    together = [p for p in done if packed(p)]
    device_s = sum(p["wall_s"] for p in done)
    ids = counted_ids(done)
    counted = [r for r in results if r.get("id") in ids]
    estimates = [r.get("one_by_one_s") for r in counted]
    alone_s = sum(v for v in estimates if v is not None)
    starts = [p["time"] - p["wall_s"] for p in done]
    train_s = sum(p.get("train_s") or 0.0 for p in done)
    out = {
        "sweep_device_s": device_s,
        "sweep_train_s": train_s,
        "train_speedup": alone_s / train_s if together and train_s and alone_s else None,
        "sweep_wall_clock_s": (max(p["time"] for p in done) - min(starts)) if done else 0.0,
        "one_by_one_s": alone_s,
        "points_without_estimate": sum(v is None for v in estimates),
        # finished points of no finished pack (their pack was stopped): on neither side of the speed-ups
        "points_outside_packs": len(results) - len(counted),
        "speedup": alone_s / device_s if together and device_s and alone_s else None,
        "packs": len(done),
        "packed_packs": len(together),  # of `packs`, those that trained models together (0: every point alone)
        "price_per_hour_usd": price_per_hour,
        # how each class's lone-model rate behind `one_by_one_s` was measured (sizing.measure_solo), once a class
        "one_by_one_methods": list(dict.fromkeys(p["one_by_one_rate"]["method"] for p in together
                                                 if isinstance(p.get("one_by_one_rate"), dict)
                                                 and p["one_by_one_rate"].get("method"))),
        # why a lone-model rate behind the speed-ups cannot carry them (sizing.SoloRate.unreliable); None: it can
        "speedup_unreliable": "; ".join(dict.fromkeys(p["one_by_one_rate"]["unreliable"] for p in together
                                                      if isinstance(p.get("one_by_one_rate"), dict)
                                                      and p["one_by_one_rate"].get("unreliable"))) or None,
    }
    out["packs_unreliable"] = packs_spread(results, together)
    if price_per_hour is not None:
        out["sweep_usd"] = device_s / 3600 * price_per_hour
        out["one_by_one_usd"] = alone_s / 3600 * price_per_hour
    return out


def failed_line(failed: list[dict[str, Any]]) -> str:
    """The report's line on the points whose last attempt failed ("" where none did): how many, and each one's error."""
    if not failed:
        return ""
    shown = "; ".join(f"{f.get('id')} ({f.get('label', '?')}): {f.get('error')}" for f in failed[:5])
    return (f"{len(failed)} point(s) FAILED (their pack raised; not in the statistics): {shown}"
            + (f"; {len(failed) - 5} more" if len(failed) > 5 else "")
            + "; tracebacks in failed/; the same command again retries them")


def counted_ids(done: list[dict[str, Any]]) -> set[str]:
    """The points of the finished packs (`done`: records without an error), each point once: the points the cost
    figures count on both sides."""
    return {i for p in done for i in p.get("ids", [])}


PACK_SPREAD = 4 / 3  # as the lone rate's windows (sizing.SoloRate.unreliable): more than a third apart


def packs_spread(results: list[dict[str, Any]], packs: list[dict[str, Any]]) -> str | None:
    """Why the packs' own timings cannot carry a speed-up, or None: packs of one size whose training time per
    model-step is more than a third apart (identical packs took 0.37 s and 7.0 s on a contended host and the
    0.09x "speed-up" was printed as sound, the label only looking at the lone rate), or packs whose threads waited
    for cores other processes held (run-queue time, at most their use of the pack's cores: `pack_foreign_wait`; as the
    lone rate's check, stride.metrics.contention.CONTENDED_THREADS)."""
    steps = {r.get("id"): (r.get("summary") or {}).get("steps") or 0 for r in results}
    by_size: dict[int, list[float]] = {}
    for p in packs:
        model_steps = sum(steps.get(i, 0) for i in p.get("ids", []))
        if not p.get("solo") and p.get("size", 0) > 1 and model_steps and p.get("train_s"):
            by_size.setdefault(p["size"], []).append(p["train_s"] / model_steps)
    why = [f"{len(t)} packs of {n} took {min(t) * 1e3:.3g}-{max(t) * 1e3:.3g} ms a model-step"
           for n, t in sorted(by_size.items()) if len(t) > 1 and max(t) > PACK_SPREAD * min(t)]
    waits = [w for p in packs if (w := pack_foreign_wait(p)) is not None and w >= CONTENDED_THREADS]
    if waits:  # the lone rate's run-queue check, applied to each pack
        why.append(f"{len(waits)} pack(s) with up to {max(waits):.2f} threads waiting for cores other processes held")
    return "; ".join(why) or None


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def pack_foreign_wait(p: dict[str, Any]) -> float | None:
    """The part of a pack's run-queue wait that other processes can have caused: at most the cores' worth they used
    on its cores (`other_processes_cores`; a record written before it was measured: the whole wait). A pack's own
    threads waiting on each other are no busy host (stride.sweep.jobs.pack_reading)."""
    return foreign_wait(_number(p.get("waiting_threads")), _number(p.get("other_processes_cores")))


def unreliable_text(c: dict[str, Any]) -> str | None:
    """The UNRELIABLE label's reasons for a speed-up figure: the lone rate's and the packs' own."""
    why = ([f"the one-by-one rate was {c['speedup_unreliable']}"] if c.get("speedup_unreliable") else []) + (
        [f"the packs' timings were of a contended host ({c['packs_unreliable']})"] if c.get("packs_unreliable")
        else [])
    return "; ".join(why) or None


def _entry(r: dict[str, Any]) -> dict[str, Any]:
    """A results.json workload entry for one point (the bench schema's required keys, then the sweep's)."""
    s = r["summary"]
    sps = s.get("samples_per_s")
    tput = {"unit": "samples/s", "median": sps, "min": sps, "max": sps, "cv": None,  # one measurement: no spread
            "n": 1 if sps is not None else 0}
    keep = ("final_val_loss", "final_train_loss", "steps", "status", "params", "params_sha256", "config_hash",
            "target_val_loss", "diverged_at_step", "step_time_s")
    return {"name": f"sweep:{r['id']}", "label": r["label"], "values": r["values"], "throughput": tput,
            "throughput_method": "packed: batch / mean step time of the pack (each model's own samples)"
            if r["mode"] == "packed" else "alone: the Trainer's samples/s after its warm-up steps",
            "mfu": None, "peak_mem_bytes": s.get("peak_mem_bytes"), "step_time_breakdown_s": {},
            "time_to_target_s": s.get("time_to_target_s"), "mode": r["mode"], "pack": r["pack"],
            **{k: s.get(k) for k in keep}, "one_by_one_s": r.get("one_by_one_s")}


def _fmt(v: Any, none: str = "-") -> str:
    if v is None:
        return none
    if isinstance(v, float):
        return f"{v:.4g}" if math.isfinite(v) else str(v)
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, float) for x in v):
        # an interval (ci95): 3 significant digits an end, what a few seeds' noise supports; str() gave 17
        # (`[-0.0722972678512862, 0.0658270570010474]`). Rounding keeps each end's sign: `significant` agrees
        return "[" + ", ".join(f"{x:.3g}" if math.isfinite(x) else str(x) for x in v) + "]"
    return str(v)


def _md_table(rows: list[dict[str, Any]], cols: list[str], none: str = "-") -> list[str]:
    return ["| " + " | ".join(md_cell(c) for c in cols) + " |", "|" + "---|" * len(cols),
            *("| " + " | ".join(md_cell(_fmt(r.get(c), none)) for c in cols) + " |" for r in rows)]


def _html_table(rows: list[dict[str, Any]], cols: list[str], none: str = "-") -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{escape(_fmt(r.get(c), none))}</td>" for c in cols) + "</tr>"
                   for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


PAIR_COLS = ["a", "b", "n_a", "n_b", "diverged_a", "diverged_b", "diff", "t", "df", "p", "p_holm", "ci95",
             "ci95_method", "significant"]
CONF_COLS = ["rank", "configuration", "mean", "sd", "seeds", "trained", "diverged", "over"]
CONF_LEGEND = ("mean and sd of final val loss over the seeds that have one (seeds, of trained); configurations "
               "with diverged seeds rank after those without (their mean is over the survivors only) and take part "
               "in no pair test")
# what the ci95 column is, for summary.md and report.html: the percentile bootstrap's "95 %" covers far less with
# few seeds (about 66 % at 2 a side), so below BOOTSTRAP_MIN_SEEDS a side the interval is Welch's t interval
CI95_LEGEND = (f"ci95: 95 % interval of the difference; ci95_method welch_t (fewer than {BOOTSTRAP_MIN_SEEDS} seeds "
               "on a side): diff +- t(0.975, Welch df) x SE, which excludes 0 exactly when the raw p < 0.05; "
               f"percentile_bootstrap ({BOOTSTRAP_MIN_SEEDS} or more seeds a side): 4000 resamples of each side's "
               "seeds")


def write_report(root: Path, plan: dict[str, Any], results: list[dict[str, Any]], packs: list[dict[str, Any]],
                 price_per_hour: float | None = None, failed: list[dict[str, Any]] | None = None,
                 seeds: list[Any] | None = None) -> dict[str, Any]:
    """Write every report file into `root`; returns the sweep section (axes, pairs, cost). `failed`: the failure
    records of the points whose pack raised (SweepStore.failures), said in every report file; `seeds`: the seeds
    the grid's points train with (what a suggestion of more seeds adds to: report.seed_advice)."""
    failed = list(failed or [])
    root = Path(root)
    keys = [a["key"] for a in plan["axes"]]
    order = {p["id"]: i for i, p in enumerate(plan["points"])}
    results = sorted(results, key=lambda r: order.get(r["id"], len(order)))
    rows = table_rows(results, keys)
    write_parquet(rows, root / "table.parquet")
    pairs = pairwise(results)
    confs = configuration_stats(results)
    advice = seed_advice(plan, results, seeds)
    section = {"grid": plan["grid"], "axes": plan["axes"], "points": len(plan["points"]), "finished": len(results),
               "failed": [{k: f.get(k) for k in ("id", "label", "pack", "error", "traceback")} for f in failed],
               "seed_keys": [k for k in keys if k in SEED_KEYS], "configurations": confs, "pairs": pairs,
               "cost": cost(results, packs, price_per_hour), "seed_advice": advice}
    conf_rows = [{**c, "rank": i + 1, "configuration": c["configuration"] or "(seeds only)", "over": seeds_text(c)}
                 for i, c in enumerate(confs)]
    obj = make_results("sweep", fingerprint(), [_entry(r) for r in results])
    obj["sweep"] = section
    atomic_write_text(root / "results.json", strict_json.dumps(obj, indent=1, default=str) + "\n")
    cols = ["point", *keys, "mode", "pack", "status", "steps", "final_val_loss", "time_to_target_s", "samples_per_s"]
    c = section["cost"]
    cost_line = (f"sweep: {c['sweep_device_s']:.1f} s of device time in {c['packs']} pack(s) (wall clock "
                 f"{c['sweep_wall_clock_s']:.1f} s), of which {c['sweep_train_s']:.1f} s training steps; one by one: "
                 f"{c['one_by_one_s']:.1f} s of training steps"
                 + (f" ({c['train_speedup']:.2f}x on training steps"
                    + (f", UNRELIABLE: {unreliable_text(c)})" if unreliable_text(c) else ")") if c["train_speedup"]
                    else " (not packed: every point trained alone)" if c["packs"] and not c["packed_packs"]
                    else "")
                 + (f"; ${c['sweep_usd']:.4f} against ${c['one_by_one_usd']:.4f}" if price_per_hour is not None
                    else "")
                 + (f"; {c['points_outside_packs']} finished point(s) of no finished pack (one a stop cut short) "
                    "are on neither side" if c["points_outside_packs"] else ""))
    methods = [f"one by one, measured: {m}" for m in c["one_by_one_methods"]]
    fail_line = failed_line(failed)
    fail_md, fail_html = ([md_cell(fail_line), ""], f"<p>{escape(fail_line)}</p>") if fail_line else ([], "")
    sig = significance_line(pairs, advice)
    md = [f"# stride sweep: {len(results)} of {len(plan['points'])} points", "",
          f"grid: {md_cell(' '.join(plan['grid']))}",
          "", *fail_md, md_cell(cost_line), "", *(m for line in methods for m in (md_cell(line), "")),
          *_md_table(rows, cols), "",
          "## Configurations", "", f"{CONF_LEGEND}.", "", *_md_table(conf_rows, CONF_COLS), "",
          "## Pairs of configurations", "", f"{sig}. A pair differs when Holm p < 0.05 and the "
          "95 % interval of the difference excludes 0; n/a: fewer than 2 seeds on a side, diverged seeds on a "
          "side (diverged_a, diverged_b), or identical results of every seed on both sides: no test.", "",
          f"{CI95_LEGEND}.", "",
          *_md_table(pairs, PAIR_COLS, "n/a")]
    atomic_write_text(root / "summary.md", "\n".join(md) + "\n")
    charts = "".join(f"<div>{c}</div>" for c in plots(results, keys)) if results else ""  # all failed: none
    html = ("<!doctype html><meta charset='utf-8'><title>stride sweep</title><style>body{font-family:sans-serif}"
            "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px}</style>"
            f"<h1>stride sweep: {len(results)} of {len(plan['points'])} points</h1><p>{escape(' '.join(plan['grid']))}"
            f"</p>{fail_html}<p>{escape(cost_line)}</p>{charts}<h2>Points</h2>{_html_table(rows, cols)}"
            f"<h2>Configurations</h2><p>{escape(CONF_LEGEND)}.</p>{_html_table(conf_rows, CONF_COLS)}"
            f"<h2>Pairs of configurations</h2><p>{escape(sig)}.</p><p>diff = mean final val "
            "loss of a minus b over seeds; Welch's t and df, two-sided p (raw and Holm-adjusted over the tested "
            f"pairs), 95 % interval ({escape(CI95_LEGEND)}); n/a: fewer than 2 seeds on a side, diverged seeds "
            "on a side (diverged_a, diverged_b), or identical results of every seed on both sides: no test.</p>"
            f"{_html_table(pairs, PAIR_COLS, 'n/a')}")
    atomic_write_text(root / "report.html", html)
    return section
