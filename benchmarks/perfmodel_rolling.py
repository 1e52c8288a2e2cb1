"""Rolling-origin test of the fitted factors: would fitting on more of the published rounds predict the later ones
better?

Every round of published runs (files `roundN_*.csv`, in `data/perfmodel/` or `data/perfmodel/holdout/`) was
transcribed blind and scored once before it could change the model. For each origin K this script fits the
efficiency factors twice, on a baseline (the original development files, rounds 1-6, or rounds <= --base-round)
and on those plus every round up to K, and scores both on the rounds after K, which neither fit saw. Same code, same
interval table: only the factors differ. This is the evidence for which rounds the shipped factors are fitted on
(docs/perfmodel.md, "Rounds 7-25 join the development data").

    .venv/bin/python benchmarks/perfmodel_rolling.py [--origins 20,25,28,30] [--json]

About 25 s a fit on this 2-core host.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from perfmodel_holdout import score_files  # noqa: E402

from stride.perfmodel import evaluate as ev  # noqa: E402
from stride.perfmodel.hardware import load_catalog  # noqa: E402


def round_of(path: Path) -> int:
    """The round a data file came in (0: the original development files, rounds 1-6, named by source)."""
    m = re.match(r"round(\d+)_", path.name)
    if m:
        return int(m.group(1))
    return 7 if path.name.startswith(("bridge_perf_", "megatron_lm_examples_")) else 0


def all_files() -> list[Path]:
    return sorted(ev.data_files() + sorted((ev.DATA_DIR / "holdout").glob("*.csv")))


def fit_on(files: list[Path]) -> dict:
    samples, *_ = ev.load_samples(files, load_catalog())
    return ev.fit(samples).to_dict()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--origins", default="20,25,28,30", help="comma-separated K: fit on rounds <= K, judge > K")
    ap.add_argument("--base-round", type=int, default=0,
                    help="the baseline fit's last round (0: the original development files; 25: the shipped fit)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    files = all_files()
    base_files = [f for f in files if round_of(f) <= args.base_round]
    out: dict = {"base_fit": fit_on(base_files), "origins": {}}
    with tempfile.TemporaryDirectory() as tmp:
        base_eff = Path(tmp) / "base.json"
        base_eff.write_text(json.dumps({"efficiency": out["base_fit"]}))
        for k in (int(x) for x in args.origins.split(",")):
            if k <= args.base_round:  # the baseline was fitted on the rounds after K: no judge left unseen by it
                print(f"origin {k} skipped: not after --base-round {args.base_round}", file=sys.stderr)
                continue
            train = [f for f in files if round_of(f) <= k]
            test = [f for f in files if round_of(f) > k]
            if not test:
                continue
            fit = fit_on(train)
            eff = Path(tmp) / f"k{k}.json"
            eff.write_text(json.dumps({"efficiency": fit}))
            out["origins"][k] = {"fit": fit, "judged_on": [f.stem for f in test],
                                 "baseline": score_files(test, str(base_eff))["all"],
                                 "with_rounds_up_to_k": score_files(test, str(eff))["all"]}
    if args.json:
        print(json.dumps(out))
        return 0
    base_name = "the original development files" if args.base_round == 0 else f"rounds <= {args.base_round}"
    print(f"factors fitted on {base_name}: {out['base_fit']}")
    for k, r in out["origins"].items():
        a, b = r["baseline"], r["with_rounds_up_to_k"]
        print(f"K={k}: judged on rounds > {k} ({b['answered']} answered): {base_name} "
              f"{a['median_abs_pct']:.1f} % ({a['median_signed_pct']:+.1f} %), p90 {a['p90_abs_pct']:.1f} %  |  "
              f"+ rounds <= {k} {b['median_abs_pct']:.1f} % ({b['median_signed_pct']:+.1f} %), "
              f"p90 {b['p90_abs_pct']:.1f} %   fit {r['fit']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
