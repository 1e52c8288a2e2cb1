"""Would the performance model have chosen right? Its picks among runs a source measured side by side.

A planner is judged by its choices, not only by its error on each run: a model 15 % slow on every layout of a
sweep still picks the fastest one, and a model 5 % off in opposite directions on two layouts that differ by 3 %
picks wrong. This script finds, in published CSVs, the *choice sets*: runs of one source that differ only in
what a user chooses, and asks whether the model's ranking agrees with the measured one.

- **layout**: the same model, part, device count, global batch, precision and framework; the runs differ in the
  layout (tp, pp, dp, cp, vpp, ZeRO/FSDP, recompute, micro-batch, kernels): what `stride plan` recommends (it
  searches within the framework it is given, so runs of two frameworks are not one set);
- **hardware**: the same model, device count, global batch, precision and framework on different parts (each part's best
  measured run against its best predicted run): what `--compare-hardware` ranks;
- **scale**: the same model, part, global batch, precision and framework on different device counts: tokens/s per device
  is the scaling efficiency a user weighs against time.

Per kind, over sets with at least two options: **top-1**, the share of sets where the option the model predicts
fastest is the measured fastest (and *within 3 %*, where it is within 3 % of it: the spread of repeated
measurements); **regret**, how much measured throughput the model's pick gives up against the best (median, p90,
worst); **pairwise order**, the share of pairs measured more than 5 % apart that the model orders the same way;
**ratio error**, between every pair, predicted ratio / measured ratio - 1 (what a comparison rests on: a bias shared
by a source's runs cancels), against each run's own |error|. Repeated measurements of one option count once, at
their median. Nothing is refitted: the shipped factors and the model as it is now.

    .venv/bin/python benchmarks/perfmodel_choices.py [FILES ...] [--json]    # default: data/perfmodel/holdout/*.csv

The held-out files are the out-of-sample figure; the development CSVs (data/perfmodel/*.csv) were fitted on.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import tempfile
from collections import defaultdict
from itertools import combinations
from pathlib import Path

from stride.perfmodel.efficiency import shipped_efficiency
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.predict_rows import predict_csv
from stride.perfmodel.published import read_rows, row_inputs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from perfmodel_holdout import HOLDOUT, _blind  # noqa: E402

TIE = 0.03  # a pick within 3 % of the best measured counts as right "within 3 %"
APART = 0.05  # pairs measured closer than this are not scored for order
KINDS = ("layout", "hardware", "scale")


@dataclasses.dataclass
class Option:
    """One choice: the runs measured for it, their median measured and predicted tokens/s per device."""

    name: str
    measured: float
    predicted: float
    rows: list[str]
    rule: tuple = ()  # the rule of thumb's order (smaller first): least model parallelism, largest micro-batch


def _layout_key(lay) -> tuple:
    d = dataclasses.asdict(lay)
    d.pop("precision", None)  # fixed by the set
    return tuple(sorted((k, repr(v)) for k, v in d.items()))


def collect(files: list[Path]) -> list[dict]:
    """Every answered row with a measurement: its choice keys and measured / predicted tokens/s per device."""
    catalog, eff, blind = load_catalog(), shipped_efficiency(), _blind()
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for f in files:
            pred = Path(tmp) / f"{f.stem}.json"
            pred.write_text(json.dumps(predict_csv(f, catalog, eff), default=str))
            scored = {r["row_id"]: r for r in blind.score([str(f)], [str(pred)])["rows"]}
            for row in read_rows(f):
                rid = str(row.get("row_id") or "").strip()
                if rid not in scored:
                    continue
                inp = row_inputs(row, catalog)
                lay = inp.layout
                out.append({
                    "row_id": rid, "file": f.stem, "source": (row.get("source") or "").strip(),
                    "table": (row.get("group") or "").strip(), "software": (row.get("framework") or "").strip(),
                    "trained": (lay.frozen, lay.lora_rank),
                    "model": repr(dataclasses.astuple(inp.spec)), "hardware": inp.hardware.name,
                    "devices": lay.devices, "global_batch": inp.global_batch, "precision": lay.precision,
                    "framework": lay.framework,
                    "layout": _layout_key(lay), "model_parallel": lay.tp * lay.pp * lay.cp,
                    "micro_batch": lay.micro_batch, "recompute": lay.recompute,
                    "measured": scored[rid]["measured_tokens_per_s"],
                    "predicted": scored[rid]["predicted_tokens_per_s"],
                })
    return out


def _merge(rows: list[dict], name_of) -> list[Option]:
    """One option per name: runs of the same software text are repeats (their median); runs the model reads alike but
    whose software differs (Thunder eager / thunder / nvFuser, a kernel library on or off) are a choice it cannot see,
    so the option is left out rather than averaged."""
    by: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by[name_of(r)].append(r)
    return [Option(k, statistics.median(r["measured"] for r in rs), statistics.median(r["predicted"] for r in rs),
                   [r["row_id"] for r in rs],
                   (rs[0]["model_parallel"], -rs[0]["micro_batch"], rs[0]["recompute"] != "none"))
            for k, rs in by.items() if len({r["software"] for r in rs}) == 1]


def _differing(rows: list[dict]):
    """Name a layout by the fields that vary within its set ("tp=2 pp=8")."""
    fields = [i for i in range(len(rows[0]["layout"])) if len({r["layout"][i] for r in rows}) > 1]

    def name(r: dict) -> str:
        return " ".join(f"{r['layout'][i][0]}={r['layout'][i][1].strip(chr(39))}" for i in fields) or "same"
    return name


def choice_sets(rows: list[dict]) -> dict[str, list[list[Option]]]:
    """The sets of each kind with at least two options."""
    # one table of one source (a source's file may hold several releases or setups: Megatron-Bridge 26.02 and
    # 26.04.01), and what is trained (LoRA against full training is not a layout choice)
    common = ("file", "table", "source", "model", "global_batch", "precision", "framework", "trained")
    sets: dict[str, list[list[Option]]] = {k: [] for k in KINDS}
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[("layout", *(r[k] for k in common), r["hardware"], r["devices"])].append(r)
        groups[("hardware", *(r[k] for k in common), r["devices"])].append(r)
        groups[("scale", *(r[k] for k in common), r["hardware"])].append(r)
    for key, rs in groups.items():
        kind = key[0]
        if kind == "layout":
            opts = _merge(rs, _differing(rs))
        else:
            # hardware: each part at its best, the measured best of its runs against the model's best of them;
            # scale: each device count so
            per: dict[str, list[dict]] = defaultdict(list)
            for r in rs:
                per[str(r["hardware"] if kind == "hardware" else r["devices"])].append(r)
            opts = []
            for name, prs in per.items():
                if merged := _merge(prs, lambda r: repr(r["layout"])):
                    opts.append(Option(name, max(o.measured for o in merged), max(o.predicted for o in merged),
                                       [i for o in merged for i in o.rows]))
        if len(opts) >= 2:
            sets[kind].append(opts)
    return sets


def _q(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def score_sets(sets: list[list[Option]], rule: bool = False) -> dict:
    """How the model's picks fare; with `rule`, the rule of thumb's picks instead (least tp x pp x cp, then the
    largest micro-batch, then no recompute: what a user does without a model), and a random pick's odds."""
    top1 = within = 0.0
    regrets, ratio_errs, own_errs, worst = [], [], [], []
    pairs = agree = ties = 0
    for opts in sets:
        best = max(opts, key=lambda o: o.measured)
        if rule:  # options the rule cannot tell apart: its expected result over them
            first = min(o.rule for o in opts)
            picks = [o for o in opts if o.rule == first]
            ties += len(picks) > 1
        else:
            picks = [max(opts, key=lambda o: o.predicted)]
        lost = [1 - o.measured / best.measured for o in picks]
        top1 += sum(o is best for o in picks) / len(picks)
        within += sum(r <= TIE for r in lost) / len(picks)
        regret = statistics.fmean(lost)
        regrets.append(regret)
        worst.append((regret, picks[0].name, best.name, picks[0].rows[0]))
        for a, b in combinations(opts, 2):  # symmetric in a and b: logs of the ratios
            m, p = math.log(a.measured / b.measured), math.log(a.predicted / b.predicted)
            ratio_errs.append(math.exp(abs(p - m)) - 1)
            if abs(m) > math.log(1 + APART):
                pairs += 1
                agree += (m > 0) == (p > 0)
        own_errs += [abs(o.predicted / o.measured - 1) for o in opts]
    misses = [r for r in regrets if r > 0]
    worst.sort(reverse=True)
    n = len(sets)
    picked = {"top1": top1 / n if n else None, "top1_within_3pct": within / n if n else None,
              "regret_median_pct": 100 * statistics.median(regrets) if regrets else None,
              "regret_p90_pct": 100 * _q(regrets, 0.9) if regrets else None,
              "regret_mean_pct": 100 * statistics.fmean(regrets) if regrets else None,
              "misses": len(misses), "miss_regret_median_pct": 100 * statistics.median(misses) if misses else None,
              "miss_regret_mean_pct": 100 * statistics.fmean(misses) if misses else None}
    if rule:
        return {**picked, "rule_ties": ties,
                "random_top1": statistics.fmean(1 / len(s) for s in sets) if sets else None}
    return {
        "sets": n, "options": sum(len(s) for s in sets), **picked,
        "pairs_scored": pairs, "pairwise_order": agree / pairs if pairs else None,
        "ratio_err_median_pct": 100 * statistics.median(ratio_errs) if ratio_errs else None,
        "own_err_median_pct": 100 * statistics.median(own_errs) if own_errs else None,
        "worst": [{"regret_pct": round(100 * r, 1), "picked": p, "best": b, "row": rid}
                  for r, p, b, rid in worst[:5] if r > TIE],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", help="CSV files (default: every file in data/perfmodel/holdout/)")
    ap.add_argument("--json", action="store_true", help="print only the JSON")
    args = ap.parse_args(argv)
    files = [Path(f) for f in args.files] or sorted(HOLDOUT.glob("*.csv"))
    missing = [str(f) for f in files if not f.is_file()]
    if not files or missing:
        ap.error(f"not a file: {', '.join(missing)}" if missing else f"no CSV files given and none in {HOLDOUT}")
    rows = collect(files)
    sets = choice_sets(rows)
    res: dict = {kind: score_sets(s) for kind, s in sets.items()}
    res["layout_rule_of_thumb"] = score_sets(sets["layout"], rule=True)
    res["rows"] = len(rows)
    if args.json:
        print(json.dumps(res))
        return 0

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:.0f}%"

    def num(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}%"

    print(f"{len(rows)} answered rows with a measurement, {len(files)} files")
    print(f"{'kind':9s} {'sets':>5s} {'opts':>5s} {'top-1':>6s} {'<=3%':>6s} {'regret med':>10s} {'p90':>6s} "
          f"{'mean':>6s} {'pairs':>6s} {'order':>6s} {'ratio err':>9s} {'own err':>8s}")
    for kind in KINDS:
        s = res[kind]
        print(f"{kind:9s} {s['sets']:5d} {s['options']:5d} {pct(s['top1']):>6s} {pct(s['top1_within_3pct']):>6s} "
              f"{num(s['regret_median_pct']):>10s} {num(s['regret_p90_pct']):>6s} {num(s['regret_mean_pct']):>6s} "
              f"{s['pairs_scored']:6d} {pct(s['pairwise_order']):>6s} {num(s['ratio_err_median_pct']):>9s} "
              f"{num(s['own_err_median_pct']):>8s}")
    r = res["layout_rule_of_thumb"]
    print(f"{'(rule)':9s} {'':5s} {'':5s} {pct(r['top1']):>6s} {pct(r['top1_within_3pct']):>6s} "
          f"{num(r['regret_median_pct']):>10s} {num(r['regret_p90_pct']):>6s} {num(r['regret_mean_pct']):>6s}"
          f"   (layout sets: least tp*pp*cp, then largest micro-batch, then no recompute, its ties at their "
          f"mean ({r['rule_ties']} sets); a random pick: top-1 {pct(r['random_top1'])})")
    lay = res["layout"]
    print(f"misses (layout): the model {lay['misses']}, lost {num(lay['miss_regret_median_pct'])} median, "
          f"{num(lay['miss_regret_mean_pct'])} mean; the rule {r['misses']}, {num(r['miss_regret_median_pct'])}, "
          f"{num(r['miss_regret_mean_pct'])}")
    for kind in KINDS:
        for w in res[kind]["worst"]:
            print(f"  {kind}: picked {w['picked']} ({w['row']}), best measured {w['best']}: {w['regret_pct']}% lost")
    return 0


if __name__ == "__main__":
    sys.exit(main())
