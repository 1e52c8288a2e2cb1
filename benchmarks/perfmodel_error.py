"""Error of the performance model against published measurements it was not fitted to.

Over every development source (data/perfmodel/*.csv, plus --csv FILE...), reports:
- leave-one-source-out (LOSO): factors fitted on the other sources (each source weighing the same),
  the held-out source predicted; the pooled median / p90 |error| of tokens/s per device, and the
  same with every source weighing the same ("balanced");
- leave-one-hardware-out (LOHO): the same with a hardware generation held out;
- errors by source, hardware generation, precision and framework (LOSO);
- the share of rows answered among those with a usable measurement, and the refusals' reasons;
- 80% interval coverage: each held-out row's interval is built from residuals of rows outside its
  group only; memory error where a row measures memory;
- the factors fitted on all rows (what `stride plan` ships) and, with --write, the interval table
  (data/perfmodel/intervals.json) and the factors (data/perfmodel/efficiency.json).
The last line is the JSON. About 2-6 minutes on 2 cores.

`--local [--rounds N]` instead checks local CPU predictions on this machine
(stride.perfmodel.local_check): measure the machine, calibrate on a tiny transformer's measured
runs (1 process; DDP and FSDP2 at 2 gloo ranks, one pinned thread each), predict held-out runs of
other models and layouts; N interleaved rounds, medians per run. About 2.5 min per round here.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from stride.perfmodel import evaluate as ev
from stride.perfmodel.efficiency import EFFICIENCY_FILE
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.intervals import DEFAULT_PATH as INTERVALS_FILE
from stride.perfmodel.intervals import IntervalTable


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", action="append", default=[], help="a further development CSV (repeatable)")
    ap.add_argument("--hardware-file", default=None)
    ap.add_argument("--no-loho", action="store_true", help="skip leave-one-hardware-out")
    ap.add_argument("--workers", type=int, default=1, help="processes fitting the held-out folds side by side")
    ap.add_argument("--write", action="store_true", help="write data/perfmodel/intervals.json and efficiency.json")
    ap.add_argument("--json", action="store_true", help="print only the JSON line")
    ap.add_argument("--local", action="store_true", help="local CPU check instead of published rows")
    ap.add_argument("--rounds", type=int, default=3, help="--local: interleaved measurement rounds")
    ap.add_argument("--steps", type=int, default=12, help="--local: training steps per measured run")
    args = ap.parse_args(argv)
    if args.local:
        return _local(args)
    t0 = time.perf_counter()
    say = (lambda s: None) if args.json else (lambda s: print(s, file=sys.stderr))
    catalog = load_catalog(args.hardware_file)
    samples, skipped, n_rows, n_meas = ev.load_samples(ev.data_files(args.csv), catalog)
    say(f"{len(samples)} rows answered of {n_meas} with a measurement ({n_rows} rows)")
    say("leave one source out:")
    loso, loso_fits = ev.held_out(samples, lambda s: s.source, say, args.workers)
    loho, loho_fits = ({}, {}) if args.no_loho else (None, None)
    if loho is None:
        say("leave one hardware generation out:")
        loho, loho_fits = ev.held_out(samples, lambda s: s.generation, say, args.workers)
    all_fit = ev.fit(samples)
    effs = {src: ev.Efficiency(**f) for src, f in loso_fits.items()}
    mem = ev.memory_errors(samples, effs)
    mem_errs = [abs(m["err_pct"]) for m in mem]
    result = {
        "rows": n_rows, "rows_with_measurement": n_meas, "answered": len(samples),
        "answered_fraction": len(samples) / n_meas if n_meas else None,
        "refused": [s for s in skipped if s["measured"]],
        "loso": {**ev.summary(loso.values()), "balanced": ev.balanced(loso, samples)},
        "loho": {**ev.summary(loho.values()), "balanced": ev.balanced(loho, samples)} if loho else None,
        "loso_by_source": ev.by(loso, samples, lambda s: s.source),
        "loso_by_hardware": ev.by(loso, samples, lambda s: s.inputs.hardware.name),
        "loso_by_precision": ev.by(loso, samples, lambda s: s.kind[1]),
        "loso_by_framework": ev.by(loso, samples, lambda s: s.kind[2]),
        "loho_by_generation": ev.by(loho, samples, lambda s: s.generation) if loho else None,
        "interval_coverage_loso": ev.coverage(samples, loso, loho or loso, lambda s: s.source),
        "interval_coverage_loho": ev.coverage(samples, loso, loho, lambda s: s.generation) if loho else None,
        "memory": {"n": len(mem), "median_abs_pct": ev.quantile(mem_errs, 0.5) if mem else None, "rows": mem},
        "fitted_on_all": all_fit.to_dict(), "loso_fits": loso_fits, "loho_fits": loho_fits,
        "per_row": [{"row_id": s.inputs.row_id, "source": s.source, "hardware": s.inputs.hardware.name,
                     "kind": list(s.kind), "measured_tokens_per_s": s.measured, "how": s.how,
                     "loso_err_pct": (math.exp(loso[i]) - 1) * 100,
                     "loho_err_pct": (math.exp(loho[i]) - 1) * 100 if loho else None}
                    for i, s in enumerate(samples)],
        "seconds": round(time.perf_counter() - t0, 1),
    }
    if args.write:
        table = IntervalTable.from_residuals([(samples[i].kind, r) for i, r in loso.items()],
                                             list((loho or {}).values()), [samples[i].source for i in loso])
        table = table.with_memory([(math.log(m["predicted_gib"] / m["measured_gib"]), m["source"]) for m in mem])
        INTERVALS_FILE.write_text(json.dumps({"basis": "ln(predicted/measured tokens/s) of development rows, each "
                                              "from the fold that held its source out (LOSO); unseen_hardware: "
                                              "the LOHO residuals; memory: ln(predicted/measured peak memory) "
                                              "(q10, q90, rows, sources) of the rows that measure it, LOSO. "
                                              "Written by benchmarks/perfmodel_error.py --write",
                                              **table.to_json()}, indent=1) + "\n")
        EFFICIENCY_FILE.write_text(json.dumps({"basis": "fitted on every development row, each source weighing the "
                                               "same (benchmarks/perfmodel_error.py --write); held-out errors are "
                                               "in docs/perfmodel.md", "efficiency": all_fit.to_dict()}, indent=1)
                                   + "\n")
    if not args.json:
        _print(result, samples, loso)
    print(json.dumps(result))
    return 0


def _line(name: str, v: dict | None) -> str:
    if not v or not v.get("n"):
        return f"{name:34s} n=0"
    return f"{name:34s} n={v['n']:4d}  median {v['median_abs_pct']:5.1f}%  p90 {v['p90_abs_pct']:5.1f}%" + (
        f"  (signed median {v['median_signed_pct']:+.1f}%)" if "median_signed_pct" in v else "")


def _print(res: dict, samples: list, loso: dict) -> None:
    print(f"answered {res['answered']} of {res['rows_with_measurement']} rows with a measurement "
          f"({res['answered_fraction'] * 100:.1f}%)")
    for r in res["refused"]:
        print(f"  refused {r['row_id']}: {r['reason']}")
    for key in ("loso", "loho"):
        if res[key]:
            b = res[key]["balanced"]
            print(_line(key.upper() + " (all rows pooled)", res[key]) +
                  f"   balanced over {b['sources']} sources: median {b['median_abs_pct']:.1f}%"
                  f" p90 {b['p90_abs_pct']:.1f}%")
    for key in ("loso_by_source", "loso_by_hardware", "loso_by_precision", "loso_by_framework", "loho_by_generation"):
        if res[key]:
            print(key)
            for g, v in res[key].items():
                print("  " + _line(g, v))
    for key in ("interval_coverage_loso", "interval_coverage_loho"):
        if res[key]:
            c = res[key]
            print(f"{key}: {c['coverage'] * 100:.1f}% of {c['n']} (median hi/lo {c['median_width_ratio']:.2f})")
    m = res["memory"]
    if m["n"]:
        print(f"memory: n={m['n']} median |error| {m['median_abs_pct']:.1f}%")
        for r in m["rows"]:
            print(f"  {r['row_id']:40s} {r['kind']:9s} measured {r['measured_gib']:6.1f} GiB  predicted "
                  f"{r['predicted_gib']:6.1f}  {r['err_pct']:+6.1f}%")
    print("worst LOSO rows:")
    worst = sorted(loso.items(), key=lambda kv: -abs(kv[1]))[:12]
    for i, r in worst:
        s = samples[i]
        print(f"  {s.inputs.row_id:42s} {(math.exp(r) - 1) * 100:+7.1f}%  {s.inputs.layout.short()}")
    print(f"factors fitted on all rows: {res['fitted_on_all']}  ({res['seconds']} s)")


def _local(args) -> int:
    import os

    from stride.perfmodel.local_check import local_check

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    res = local_check(steps=args.steps, rounds=args.rounds, log=(lambda s: None) if args.json else print)
    res["load_average_1min_before"] = load
    res["load_average_1min_after"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    if not args.json:
        for part in ("calibration", "held_out"):
            print(part)
            for r in res[part]:
                print(f"  {Path(r['run']).name.rsplit('-r', 1)[0]:18s} measured {r['measured_step_s'] * 1e3:7.1f} ms"
                      f"  predicted {r['predicted_step_s'] * 1e3:7.1f} ms  {r['err_pct']:+6.1f}%")
        print(f"held-out |error|: median {res['held_out_median_abs_pct']:.1f}%, max {res['held_out_max_abs_pct']:.1f}%"
              f" (goal 15%); factors {res['efficiency']}; load {load} -> {res['load_average_1min_after']}")
    res.pop("measured_rounds_s", None)
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
