"""The performance model on every held-out file at once: answered, error and interval coverage per file.

`data/perfmodel/holdout/` holds published runs kept out of the development set (rounds 26-36; rounds 7-25 joined
the development set on 2026-12-06): each file was transcribed blind and scored once by the commit its section of
docs/perfmodel.md names. This script scores
the model as it is now on all of them (not blind any more: the readings fixed after each round are in), so a
change to the model shows at once where it moves the unseen data, and what a user can expect away from the rows
the factors were fitted on. Nothing is refitted: the shipped factors and interval table, as `stride plan` uses.

    .venv/bin/python benchmarks/perfmodel_holdout.py [FILES ...] [--efficiency FILE] [--json]

Per file and over all rows: rows with a measurement, answered, median / p90 |error| of tokens/s per device
(error = predicted / measured - 1), signed median, 80% interval coverage, and memory error where measured.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

from stride.perfmodel.efficiency import load_efficiency, shipped_efficiency
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.predict_rows import predict_csv

HOLDOUT = Path(__file__).resolve().parents[1] / "data" / "perfmodel" / "holdout"


def _blind():
    """benchmarks/perfmodel_blind.py's scorer (the same conversion of every row's measurement)."""
    spec = importlib.util.spec_from_file_location("perfmodel_blind", Path(__file__).with_name("perfmodel_blind.py"))
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def _figures(res: dict) -> dict:
    return {"rows_with_measurement": res["rows_with_measurement"], "answered": res["answered"],
            "median_abs_pct": res["median_abs_pct"], "p90_abs_pct": res["p90_abs_pct"],
            "median_signed_pct": res["median_signed_pct"], "interval_coverage": res["interval_coverage"],
            "memory_n": res["memory"]["n"], "memory_median_abs_pct": res["memory"]["median_abs_pct"],
            "memory_median_signed_pct": res["memory"]["median_signed_pct"],
            "memory_interval_coverage": res["memory"]["interval_coverage"]}


def score_files(files: list[Path], efficiency: str | None = None) -> dict:
    """{"files": {name: figures}, "all": figures} of the model now on `files`."""
    blind = _blind()
    catalog = load_catalog()
    eff = load_efficiency(efficiency) if efficiency else shipped_efficiency()
    per, preds = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for f in files:
            pred = Path(tmp) / f"{f.stem}.json"
            pred.write_text(json.dumps(predict_csv(f, catalog, eff), default=str))
            preds.append(pred)
            per[f.stem] = _figures(blind.score([str(f)], [str(pred)]))
        total = _figures(blind.score([str(f) for f in files], [str(p) for p in preds]))
    return {"files": per, "all": total}


def _pct(v: float | None, signed: bool = False) -> str:
    return "-" if v is None else (f"{v:+.1f}%" if signed else f"{v:.1f}%")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", help="CSV files (default: every file in data/perfmodel/holdout/)")
    ap.add_argument("--efficiency", default=None, help="calibration JSON (default: the shipped factors)")
    ap.add_argument("--json", action="store_true", help="print only the JSON")
    args = ap.parse_args(argv)
    files = [Path(f) for f in args.files] or sorted(HOLDOUT.glob("*.csv"))
    if not files:
        ap.error(f"no CSV files given and none in {HOLDOUT}")
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        ap.error(f"not a file: {', '.join(missing)}")
    res = score_files(files, args.efficiency)
    if args.json:
        print(json.dumps(res))
        return 0
    print(f"{'file':34s} {'rows':>5s} {'answered':>8s} {'median':>7s} {'p90':>7s} {'signed':>7s} {'80% cov':>7s}"
          "  memory")
    for name, s in [*res["files"].items(), ("all", res["all"])]:
        cov = None if s["interval_coverage"] is None else 100 * s["interval_coverage"]
        mcov = s["memory_interval_coverage"]
        mem = (f"{_pct(s['memory_median_abs_pct'])} of {s['memory_n']}, signed "
               f"{_pct(s['memory_median_signed_pct'], True)}, 80% cov {_pct(None if mcov is None else 100 * mcov)}"
               if s["memory_n"] else "-")
        print(f"{name:34s} {s['rows_with_measurement']:5d} {s['answered']:8d} {_pct(s['median_abs_pct']):>7s} "
              f"{_pct(s['p90_abs_pct']):>7s} {_pct(s['median_signed_pct'], True):>7s} {_pct(cov):>7s}  {mem}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
