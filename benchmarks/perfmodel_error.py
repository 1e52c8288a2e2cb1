"""Error of the performance model against published measurements (tokens/s per GPU, memory).

Reports, on the rows of a published-results CSV: the error with the shipped default factors,
a two-fold split (fit on one half, report the other, both ways), leave-one-out (fit on all rows
but one, predict that one) and leave-one-source-out. The last line is JSON with the headline figures.

`--local [--rounds N]` instead checks local CPU predictions on this machine
(stride.perfmodel.local_check): measure the machine, calibrate on a tiny transformer's measured
runs (1 process; DDP and FSDP2 at 2 gloo ranks, one pinned thread each), predict held-out runs of
other models and layouts; N interleaved rounds, medians per run. About 2.5 min per round here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.fit import fit_efficiency
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.predict_rows import predict_inputs
from stride.perfmodel.published import measured_tokens_per_s_per_gpu, read_rows, row_inputs

DEFAULT_CSV = Path(__file__).resolve().parents[1].parent / "shared" / "perfmodel" / "published_dev.csv"


def _pctl(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def _summary(errs: list[float]) -> dict:
    return {"n": len(errs), "median_abs_pct": _pctl(errs, 0.5), "p90_abs_pct": _pctl(errs, 0.9)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--csv", default=str(DEFAULT_CSV))
    ap.add_argument("--hardware-file", default=None)
    ap.add_argument("--no-loo", action="store_true", help="skip leave-one-out (the slow part)")
    ap.add_argument("--json", action="store_true", help="print only the JSON line")
    ap.add_argument("--local", action="store_true", help="local CPU check instead of published rows")
    ap.add_argument("--rounds", type=int, default=3, help="--local: interleaved measurement rounds")
    ap.add_argument("--steps", type=int, default=12, help="--local: training steps per measured run")
    args = ap.parse_args(argv)
    if args.local:
        return _local(args)
    t0 = time.perf_counter()
    catalog = load_catalog(args.hardware_file)
    rows = read_rows(args.csv)
    samples, skipped, mem_pairs = [], [], []
    for row in rows:
        inp = row_inputs(row, catalog)
        if inp.reason:
            skipped.append({"row_id": inp.row_id, "reason": inp.reason})
            continue
        meas, how = measured_tokens_per_s_per_gpu(row, inp)
        if meas is None:
            skipped.append({"row_id": inp.row_id, "reason": how})
            continue
        samples.append((inp, meas, row))

    def fn(inp):
        return lambda e: predict_inputs(inp, e).tokens_per_s_per_device

    def errors(eff: Efficiency, subset) -> list[float]:
        return [abs(predict_inputs(inp, eff).tokens_per_s_per_device / meas - 1) * 100 for inp, meas, _ in subset]

    default = Efficiency()
    per_row = []
    for inp, meas, row in samples:
        pred = predict_inputs(inp, default)
        per_row.append({"row_id": inp.row_id, "pred": pred.tokens_per_s_per_device, "meas": meas,
                        "err_pct": (pred.tokens_per_s_per_device / meas - 1) * 100})
        mem = row.get("meas_peak_mem_gib", "").strip()
        if mem:
            with contextlib.suppress(ValueError):
                mem_pairs.append(abs(pred.peak_mem_gib / float(mem) - 1) * 100)
    # two-fold split, alternating rows so each half spans every source group
    half_a, half_b = samples[0::2], samples[1::2]
    split_errs = []
    fits = {}
    for name, train, test in (("a", half_a, half_b), ("b", half_b, half_a)):
        eff = fit_efficiency([(fn(i), m) for i, m, _ in train])
        fits[f"fit_on_{name}"] = eff.to_dict()
        split_errs += errors(eff, test)
    # leave one source group out: fit on the other papers, predict this one (the harder test:
    # a new source brings its own hardware, software generation and unstated settings)
    group_errs: dict[str, dict] = {}
    groups = sorted({row.get("group", "") for _, _, row in samples})
    if len(groups) > 1:
        for g in groups:
            train = [x for x in samples if x[2].get("group", "") != g]
            test = [x for x in samples if x[2].get("group", "") == g]
            eff = fit_efficiency([(fn(i), m) for i, m, _ in train])
            group_errs[g] = {**_summary(errors(eff, test)), "fit": eff.to_dict()}
    loo_errs = []
    if not args.no_loo:
        for k in range(len(samples)):
            train = samples[:k] + samples[k + 1:]
            eff = fit_efficiency([(fn(i), m) for i, m, _ in train], sweeps=2, grid=9)
            loo_errs += errors(eff, [samples[k]])
    result = {
        "csv": str(args.csv), "rows": len(rows), "modelled": len(samples), "skipped": skipped,
        "default_factors": default.to_dict(),
        "default": _summary([abs(r["err_pct"]) for r in per_row]),
        "split_holdout": _summary(split_errs),
        "leave_one_out": _summary(loo_errs) if loo_errs else None,
        "leave_group_out": group_errs or None,
        "split_fits": fits,
        "peak_mem": _summary(mem_pairs) if mem_pairs else None,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    if not args.json:
        print(f"{'row':12s} {'pred tok/s/gpu':>15s} {'measured':>10s} {'err %':>7s}")
        for r in per_row:
            print(f"{r['row_id']:12s} {r['pred']:15.1f} {r['meas']:10.1f} {r['err_pct']:+7.1f}")
        for s in skipped:
            print(f"{s['row_id']:12s} skipped: {s['reason']}")
        for g, v in group_errs.items():
            print(f"group {g} held out: n={v['n']} median |err| {v['median_abs_pct']:.1f}%"
                  f"  p90 {v['p90_abs_pct']:.1f}%")
        for key in ("default", "split_holdout", "leave_one_out", "peak_mem"):
            if result[key]:
                v = result[key]
                print(f"{key:14s} n={v['n']:3d} median |err| {v['median_abs_pct']:.1f}%  p90 {v['p90_abs_pct']:.1f}%")
    print(json.dumps(result))
    return 0


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
