"""The sweep's report: one table of every point, the seed-level significance of every pair of configurations,
plots of the final validation loss against each swept key, and what the sweep cost against one by one.

Written into the sweep directory: `table.parquet` (one row per point, pyarrow), `results.json` (the bench
results schema: one workload entry per point, plus a `sweep` section), `report.html` (self-contained,
inline SVG) and `summary.md`. A configuration is a point's values without its seed keys (`train.seed`,
`data.seed`); its seeds are the samples the statistics use.

A diverged seed has no loss, so a configuration's mean is over the seeds that did not diverge; the divergence is
part of its result and is said beside it (`configuration_stats`: seeds in the mean, seeds trained, seeds
diverged). Configurations with a diverged seed rank after those without, and a pair with diverged seeds on a
side is not tested: the survivors of a configuration that diverged are not a sample of its seeds, and one where
4 of 6 seeds diverged came out first and "significantly better" on its 2 survivors (audit 10, F2).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from itertools import combinations
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from stride.report.svg import spread_chart
from stride.sweep.stats import MORE_SEEDS, diff_interval, holm, mean_sd, no_seed_spread, welch

SEED_KEYS = ("train.seed", "data.seed")
SUMMARY_COLUMNS = ("status", "steps", "final_train_loss", "final_val_loss", "time_to_target_s", "diverged_at_step",
                   "samples_per_s", "step_time_s", "wall_time_s", "peak_mem_bytes", "params", "config_hash",
                   "params_sha256")


def _cell(v: Any) -> Any:
    """A table cell: numbers and strings as they are, lists and tables as JSON text."""
    if v is None or isinstance(v, bool | int | str):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    return json.dumps(v)


def table_rows(results: list[dict[str, Any]], keys: list[str]) -> list[dict[str, Any]]:
    rows = []
    for r in results:
        s = r["summary"]
        row = {"point": r["id"], "label": r["label"]}
        row.update({k: _cell(r["values"].get(k)) for k in keys})
        row.update({"mode": r["mode"], "pack": r["pack"]["index"], "pack_size": r["pack"]["size"]})
        row.update({k: _cell(s.get(k)) for k in SUMMARY_COLUMNS})
        row["one_by_one_s"] = _cell(r.get("one_by_one_s"))
        rows.append(row)
    return rows


def write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(pa.Table.from_pylist(rows), tmp)
    tmp.replace(path)


def configurations(results: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Points grouped by their values without the seed keys ("" when only seeds are swept)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        name = " ".join(f"{k}={json.dumps(v)}" for k, v in r["values"].items() if k not in SEED_KEYS)
        out.setdefault(name, []).append(r)
    return out


def _diverged(r: dict[str, Any]) -> bool:
    return r["summary"].get("status") == "diverged"


def _val(r: dict[str, Any]) -> float | None:
    v = r["summary"].get("final_val_loss")
    return v if isinstance(v, int | float) and math.isfinite(v) and not _diverged(r) else None


def configuration_stats(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per configuration: the mean and sd of final val loss over its seeds that have one (`seeds`), how many seeds
    were trained (`trained`) and how many diverged (`diverged`), ranked: configurations with no diverged seed by
    mean, then those with some by mean (a mean over survivors only), then those with no loss at all."""
    rows = []
    for name, rs in configurations(results).items():
        vals = [v for v in map(_val, rs) if v is not None]
        mean, sd = mean_sd(vals)  # None past the float range (extreme values), never an OverflowError
        rows.append({"configuration": name, "mean": mean, "sd": sd, "seeds": len(vals), "trained": len(rs),
                     "diverged": sum(map(_diverged, rs))})
    return sorted(rows, key=lambda r: (r["mean"] is None, r["diverged"] > 0, r["mean"] or 0.0, r["configuration"]))


# why a pair is not tested (`not_tested`), in the order they are looked for
ALL_DIVERGED = "every seed of a side diverged (no loss to compare)"
SOME_DIVERGED = "seeds diverged on a side (a mean over its survivors only)"
NO_LOSS = "fewer than 2 seeds with a final val loss on a side"
ONE_SEED = "seed noise unknown with fewer than 2 seeds per configuration"
IDENTICAL = "seeds gave identical results on both sides (no spread a float holds): seed noise unknown"
NO_FIGURE = "final val losses too large for the test's figures"


def _why_untested(sa: dict[str, Any], sb: dict[str, Any], a: list[float], b: list[float]) -> str | None:
    """Why the pair of configurations with stats rows `sa`, `sb` and final val losses `a`, `b` is not tested (None:
    it is)."""
    if any(s["diverged"] and not s["seeds"] for s in (sa, sb)):
        return ALL_DIVERGED
    if sa["diverged"] or sb["diverged"]:
        return SOME_DIVERGED
    if sa["trained"] < 2 or sb["trained"] < 2:
        return ONE_SEED
    if sa["seeds"] < 2 or sb["seeds"] < 2:
        return NO_LOSS
    if no_seed_spread(a, b):  # a t of inf and p = 0 would claim certainty; welch's own test of it, not a second
        return IDENTICAL
    return None


def pairwise(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For every pair of configurations: mean difference of final val loss, Welch's t, df, p (raw and Holm),
    and the 95 % interval of the difference (`ci95`; `ci95_method`: Welch's t interval below
    BOOTSTRAP_MIN_SEEDS seeds a side, whose percentile bootstrap covers far less than 95 %, else the bootstrap);
    `significant` when Holm's p < 0.05 and the interval excludes 0. No test (the test's figures and
    `significant` None: no claim either way; `not_tested` says why) with fewer than 2 seeds on a side, with
    diverged seeds on a side (module docstring), or where every seed of both sides gave the same loss (no spread:
    seed noise unknown, where Welch's t was inf and p 0); Holm adjusts over the tested pairs."""
    by_name = configurations(results)
    confs = {k: [v for v in map(_val, rs) if v is not None] for k, rs in by_name.items()}
    stats = {row["configuration"]: row for row in configuration_stats(results)}
    pairs = []
    for a, b in combinations(sorted(confs), 2):
        why = _why_untested(stats[a], stats[b], confs[a], confs[b])
        w, ci = (welch(confs[a], confs[b]), diff_interval(confs[a], confs[b])) if why is None else (None, None)
        if why is None and w is None:  # no finite figures (values near the float range): no test, said why
            why, ci = NO_FIGURE, None
        pairs.append({"a": a, "b": b, "n_a": len(confs[a]), "n_b": len(confs[b]),
                      "trained_a": stats[a]["trained"], "trained_b": stats[b]["trained"],
                      "diverged_a": stats[a]["diverged"], "diverged_b": stats[b]["diverged"],
                      "mean_a": stats[a]["mean"], "mean_b": stats[b]["mean"],
                      "diff": w.diff if w else None, "t": w.t if w else None, "df": w.df if w else None,
                      "p": w.p if w else None, "ci95": list(ci[0]) if ci else None,
                      "ci95_method": ci[1] if ci else None, "not_tested": why})
    for pair, adj in zip(pairs, holm([p["p"] for p in pairs]), strict=True):
        pair["p_holm"] = adj
        pair["significant"] = None if adj is None else bool(adj < 0.05 and pair["ci95"] and
                                                            (pair["ci95"][0] > 0 or pair["ci95"][1] < 0))
    return pairs


def seed_advice(plan: dict[str, Any], results: list[dict[str, Any]], seeds: list[Any] | None = None) -> str:
    """What gives a configuration with fewer than 2 finished seeds its seed noise, as the report suggests it.

    Where the grid already has 2 or more seeds a configuration (the product of its seed axes), only its unfinished
    points are missing (a stopped or failed sweep): the same command again trains them. Before, such a sweep said
    "add seeds with --grid train.seed=0..2" when its grid was `--grid train.seed=0..2` already. Where it has one seed,
    the advice is a seed axis of seeds the grid does not have, beside the one it has (`seeds`: the seeds its points
    train with; seed 0 gives `--grid train.seed=0..2`, seed 5 `5..7`), in another folder: a sweep folder holds one
    grid, and a changed grid is refused there."""
    per_conf = math.prod(len(a["values"]) for a in plan.get("axes", []) if a.get("key") in SEED_KEYS)
    if per_conf >= 2:
        left = len(plan.get("points", [])) - len(results)
        return (f"the grid has {per_conf} seeds a configuration, {left} point(s) not finished: run the same command "
                "again to train them")
    have = sorted({v for v in (seeds or []) if isinstance(v, int) and not isinstance(v, bool)})
    if not have:
        return f"add seeds with {MORE_SEEDS}"
    grid = sorted({*have, have[-1] + 1, have[-1] + 2})
    text = f"{grid[0]}..{grid[-1]}" if grid == list(range(grid[0], grid[-1] + 1)) else ",".join(map(str, grid))
    return f"add seeds with --grid train.seed={text} in another --out (a sweep folder holds one grid)"


def _reasons(untested: list[dict[str, Any]], advice: str) -> str:
    """Why the untested pairs were not tested: the one reason, or each with its count. Advice on seeds (`advice`,
    from seed_advice) is given only where too few seeds were trained: it does not help a configuration whose seeds
    diverged."""
    counts = Counter(p.get("not_tested") or ONE_SEED for p in untested)
    text = (next(iter(counts)) if len(counts) == 1
            else "; ".join(f"{why}, {n} pair{'s' if n > 1 else ''}" for why, n in counts.items()))
    return text + (f"; {advice}" if ONE_SEED in counts else "")


def significance_line(pairs: list[dict[str, Any]], advice: str = f"add seeds with {MORE_SEEDS}") -> str:
    """How many pairs differ beyond seed noise, claimed only of the pairs that were tested (seed noise known, no
    diverged seeds on a side: "0 of 1 pairs differ" would read as a tested result), and why the others were not;
    `advice`: what gives too few seeds their noise (seed_advice: the grid's seeds are not suggested again)."""
    tested = [p for p in pairs if p["significant"] is not None]
    if not pairs:
        return "one configuration: no pairs to compare"
    untested = [p for p in pairs if p["significant"] is None]
    if not tested:
        return f"no claim on which configurations differ: {_reasons(untested, advice)}"
    line = f"{sum(p['significant'] for p in tested)} of {len(tested)} configuration pairs differ beyond seed noise"
    return line + (f"; {len(untested)} pair(s) not tested: {_reasons(untested, advice)}" if untested else "")


def seeds_text(row: dict[str, Any]) -> str:
    """A configuration's seeds in words, for the log and the report: how many the mean is over out of how many were
    trained, and how many diverged ("2 of 6 seeds; 4 of 6 seeds diverged")."""
    k, n, d = row["seeds"], row["trained"], row["diverged"]
    text = f"{k} seed{'s' if k != 1 else ''}" if k == n else f"{k} of {n} seeds"
    if d:
        text += f"; {d} of {n} seeds diverged"
    if n - k - d:
        text += f"; {n - k - d} of {n} seeds without a final val loss"
    return text


def _numeric(values: list[Any]) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def _axis(values: list[Any]) -> tuple[dict[str, float], dict[float, str], bool]:
    """x position of each value (by its JSON text), tick labels, and whether the axis is log10: a positive
    numeric key spanning a decade or more (learning rates) is; other numbers are linear; others categorical."""
    texts = sorted({json.dumps(v) for v in values})
    decoded = [json.loads(t) for t in texts]
    if not _numeric(decoded):
        return {t: float(i) for i, t in enumerate(texts)}, {float(i): t for i, t in enumerate(texts)}, False
    log = min(decoded) > 0 and max(decoded) / min(decoded) >= 10
    pos = {t: math.log10(d) if log else float(d) for t, d in zip(texts, decoded, strict=True)}
    return pos, {pos[t]: f"{d:g}" for t, d in zip(texts, decoded, strict=True)}, log


def plots(results: list[dict[str, Any]], keys: list[str]) -> list[str]:
    """Per swept key (seeds aside): final val loss, mean and seed min..max, against the key's values; one
    series per combination of the other keys."""
    charts = []
    for key in (k for k in keys if k not in SEED_KEYS):
        pos, ticks, log = _axis([r["values"][key] for r in results])
        series: dict[str, dict[float, list[float]]] = {}
        for r in results:
            v = _val(r)
            if v is None:
                continue
            other = " ".join(f"{k}={json.dumps(x)}" for k, x in r["values"].items() if k != key and k not in SEED_KEYS)
            series.setdefault(other or "all", {}).setdefault(pos[json.dumps(r["values"][key])], []).append(v)
        spread = {name: [(x, m, min(ys), max(ys)) for x, ys in sorted(pts.items())
                         if (m := mean_sd(ys)[0]) is not None] for name, pts in series.items()}
        charts.append(spread_chart(spread, f"final val loss vs {key} (mean; whisker: seeds min..max)",
                                   f"log10({key})" if log else key, "final val loss", ticks))
    return charts
