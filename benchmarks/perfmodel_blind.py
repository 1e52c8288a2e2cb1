"""Score `stride plan --from-csv FILE --json` output against the measurements in FILE: a blind test.

Nothing is refitted: the predictions are whatever the CLI printed (its shipped factors and interval
table), so running the CLI of a frozen commit and this script on new rows gives that commit's
out-of-sample figures. Reports, over the rows that carry a measurement: the fraction answered and
every refusal reason, median / p90 |error| of tokens/s per device (error = predicted / measured - 1),
the coverage of the 80% intervals, memory error on every answered row that measures memory (with or without a
throughput), and the same by
source group, hardware, precision and framework.

    stride plan --from-csv data/perfmodel/mlperf_training.csv --json > pred.json
    .venv/bin/python benchmarks/perfmodel_blind.py data/perfmodel/mlperf_training.csv pred.json [--json]

The measured value of a row is read with stride.perfmodel.measured (the same conversion the
development-set judge uses), from whichever stride is importable.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

from stride.perfmodel.evaluate import error_stats
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.measured import has_measurement, measured_memory_gib
from stride.perfmodel.published import read_rows, row_inputs


def refusal_kind(reason: str) -> str:
    """The input a refusal names, without the row's own text: "recompute '...' is not understood"."""
    kind = re.sub(r"'[^']*'", "'...'", reason)
    return re.sub(r"\s*\([^()]*\)", "", kind).split("; ")[0].strip()


def score(csv_paths: list[str], pred_paths: list[str], hardware_file: str | None = None) -> dict:
    catalog = load_catalog(hardware_file)
    rows, preds = [], {}
    for p in csv_paths:
        rows += read_rows(p)
    for p in pred_paths:
        for obj in json.loads(Path(p).read_text(encoding="utf-8")):
            preds[obj["row_id"]] = obj
    out_rows, refused, groups = [], [], defaultdict(list)
    n_meas = covered = n_cov = 0
    mem, mem_inside = [], []
    for row in rows:
        rid = str(row.get("row_id") or "").strip()
        pred = preds.get(rid) or {}
        # memory on every row that measures it and was answered, with or without a throughput measurement
        m = measured_memory_gib(row)
        mem_err = (pred["peak_mem_gib"] / m - 1) * 100 if m and pred.get("peak_mem_gib") else None
        if mem_err is not None:
            mem.append(mem_err / 100)
            if pred.get("peak_mem_gib_lo") is not None:
                mem_inside.append(pred["peak_mem_gib_lo"] <= m <= pred["peak_mem_gib_hi"])
        if not has_measurement(row):
            continue
        n_meas += 1
        if pred.get("tokens_per_s_per_gpu") is None:
            refused.append({"row_id": rid, "reason": pred.get("reason", "no prediction printed for this row")})
            continue
        inp = row_inputs(row, catalog)  # the measurement's conversion needs the row's model and batch
        if inp.reason:
            refused.append({"row_id": rid, "reason": f"(answered, but its measurement is unreadable: {inp.reason})"})
            continue
        meas, how = inp.measured(row)
        if not meas:
            refused.append({"row_id": rid, "reason": f"(answered, no readable measurement: {how})"})
            continue
        err = pred["tokens_per_s_per_gpu"] / meas - 1
        lo, hi = pred.get("tokens_per_s_per_gpu_lo"), pred.get("tokens_per_s_per_gpu_hi")
        inside = None
        if lo is not None and hi is not None:
            inside = lo <= meas <= hi
            n_cov += 1
            covered += inside
        rec = {"row_id": rid, "group": (row.get("group") or "?").strip(), "hardware": inp.hardware.name,
               "precision": inp.kind[1] if inp.layout.precision != "fp4" else "fp4", "framework": inp.layout.framework,
               "measured_tokens_per_s": meas, "predicted_tokens_per_s": pred["tokens_per_s_per_gpu"],
               "err_pct": err * 100, "in_interval": inside, "assumed": pred.get("assumed", [])}
        if mem_err is not None:
            rec["mem_err_pct"] = mem_err
        out_rows.append(rec)
        for key in ("group", "hardware", "precision", "framework"):
            groups[(key, rec[key])].append(err)
    errs = [r["err_pct"] / 100 for r in out_rows]
    kinds: dict[str, int] = defaultdict(int)
    for r in refused:
        kinds[refusal_kind(r["reason"])] += 1
    by: dict[str, dict] = defaultdict(dict)
    for (key, name), e in sorted(groups.items()):
        by[key][name] = error_stats(e)
    return {
        "rows_with_measurement": n_meas, "answered": len(out_rows),
        "answered_fraction": len(out_rows) / n_meas if n_meas else None,
        "refused": refused, "refusal_kinds": dict(sorted(kinds.items(), key=lambda kv: -kv[1])),
        **error_stats(errs),
        "interval_coverage": covered / n_cov if n_cov else None, "interval_n": n_cov,
        "memory": {**error_stats(mem),
                   "interval_coverage": sum(mem_inside) / len(mem_inside) if mem_inside else None},
        "by": dict(by), "rows": out_rows,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pairs", nargs="+", help="CSV and its prediction JSON, alternating: a.csv a.json b.csv b.json ...")
    ap.add_argument("--hardware-file", default=None)
    ap.add_argument("--json", action="store_true", help="print only the JSON")
    args = ap.parse_args(argv)
    if len(args.pairs) % 2:
        ap.error("give CSV / prediction-JSON pairs")
    res = score(args.pairs[0::2], args.pairs[1::2], args.hardware_file)
    if not args.json:
        def line(name: str, s: dict) -> str:
            if not s["n"]:
                return f"{name:40s} n=0"
            return (f"{name:40s} n={s['n']:3d}  median {s['median_abs_pct']:6.1f}%  p90 {s['p90_abs_pct']:6.1f}%"
                    f"  (signed median {s['median_signed_pct']:+.1f}%)")
        print(f"answered {res['answered']} of {res['rows_with_measurement']} rows with a measurement "
              f"({(res['answered_fraction'] or 0) * 100:.1f}%)")
        for r in res["refused"]:
            print(f"  refused {r['row_id']}: {r['reason']}")
        for kind, n in res["refusal_kinds"].items():
            print(f"  {n:3d} refused: {kind}")
        print(line("all answered rows", res))
        if res["interval_coverage"] is not None:
            print(f"80% interval coverage: {res['interval_coverage'] * 100:.1f}% of {res['interval_n']}")
        print(line("memory (where measured)", res["memory"]))
        if res["memory"]["interval_coverage"] is not None:
            print(f"memory 80% interval coverage: {res['memory']['interval_coverage'] * 100:.1f}%")
        for key, groups in res["by"].items():
            print(f"by {key}:")
            for name, s in groups.items():
                print("  " + line(name, s))
        print("rows:")
        for r in sorted(res["rows"], key=lambda r: -abs(r["err_pct"])):
            print(f"  {r['row_id']:42s} measured {r['measured_tokens_per_s']:9.1f}"
                  f"  predicted {r['predicted_tokens_per_s']:9.1f}"
                  f"  {r['err_pct']:+6.1f}%  {'in' if r['in_interval'] else 'OUT'}")
    print(json.dumps(res) if args.json else "", end="\n" if args.json else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
