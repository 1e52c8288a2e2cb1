"""Judge the model on published rows it was not fitted to: leave one source out, leave one
hardware generation out, interval coverage, memory error.

Fitting: the efficiency factors (efficiency.py) by a weighted pattern search (fit.py) on
ln(predicted / measured tokens/s); every source weighs the same however many rows it has, so one
large table cannot decide the factors. A held-out fold's errors come from factors fitted without
any of its rows; nothing about its rows (not even the choice of factors) is fitted to it.
"""

from __future__ import annotations

import glob
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.fit import fit_efficiency
from stride.perfmodel.hardware import Catalog
from stride.perfmodel.intervals import IntervalTable, apply, quantile
from stride.perfmodel.measured import has_measurement, measured_memory_gib
from stride.perfmodel.predict_rows import memory_as_measured, predict_inputs
from stride.perfmodel.published import RowInputs, read_rows, row_inputs

DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "perfmodel"
FACTORS = ("gemm", "gemm_tpu", "attention", "memory")


@dataclass
class Sample:
    row: dict
    inputs: RowInputs
    measured: float
    how: str

    @property
    def source(self) -> str:
        return (self.row.get("group") or self.row.get("source") or "?").strip()

    @property
    def generation(self) -> str:
        return self.inputs.kind[0]

    @property
    def kind(self) -> tuple[str, ...]:
        return self.inputs.kind


def data_files(extra: Iterable[str] = ()) -> list[Path]:
    return sorted(Path(p) for p in glob.glob(str(DATA_DIR / "*.csv"))) + [Path(p) for p in extra]


def load_samples(paths: Iterable[Path], catalog: Catalog) -> tuple[list[Sample], list[dict], int, int]:
    """(samples, skipped rows with reasons, rows, rows with a usable measurement)."""
    samples, skipped, n_rows, n_meas = [], [], 0, 0
    for path in paths:
        for row in read_rows(path):
            n_rows += 1
            has_meas = has_measurement(row)
            n_meas += has_meas
            inp = row_inputs(row, catalog)
            if inp.reason:
                skipped.append({"row_id": inp.row_id, "file": path.name, "reason": inp.reason, "measured": has_meas})
                continue
            meas, how = inp.measured(row)
            if meas is None:
                skipped.append({"row_id": inp.row_id, "file": path.name, "reason": how, "measured": has_meas})
                continue
            samples.append(Sample(row, inp, meas, how))
    return samples, skipped, n_rows, n_meas


def _predict(s: Sample, eff: Efficiency) -> float:
    return predict_inputs(s.inputs, eff).tokens_per_s_per_device


def is_tpu(s: Sample) -> bool:
    return s.inputs.hardware.vendor == "google"


def fit(train: list[Sample], factors: Iterable[str] = FACTORS, min_rows: int = 10) -> Efficiency:
    """Factors fitted on `train`, each source weighing 1. The TPU-only factors (gemm_tpu, and
    attention: TPUs have no published attention curve) keep their priors with fewer than `min_rows`
    TPU rows; the GPU ones (gemm, flash) likewise without GPU rows."""
    count: dict[str, int] = {}
    for s in train:
        count[s.source] = count.get(s.source, 0) + 1
    n_tpu = sum(is_tpu(s) for s in train)
    skip = set()
    if n_tpu < min_rows:
        skip |= {"gemm_tpu", "attention"}
    if len(train) - n_tpu < min_rows:
        skip |= {"gemm", "flash"}
    free = tuple(f for f in factors if f not in skip)
    samples = [(lambda e, s=s: _predict(s, e), s.measured) for s in train]
    weights = [1.0 / count[s.source] for s in train]
    return fit_efficiency(samples, free, sweeps=0, weights=weights, min_step=0.01)


def held_out(samples: list[Sample], group: Callable[[Sample], str],
             log: Callable[[str], None] = lambda s: None,
             workers: int = 1) -> tuple[dict[int, float], dict[str, dict]]:
    """ln(pred/meas) of every sample, predicted by factors fitted without its group; the fits. `workers` > 1 fits
    the folds in that many forked processes (each fold is independent; about 20 s a fold on 1,300 rows, so a
    leave-one-source-out over 170 sources is an hour on one core)."""
    groups = sorted({group(s) for s in samples})
    train_of = [[s for s in samples if group(s) != g] for g in groups]
    if workers > 1 and len(groups) > 1:
        import multiprocessing

        global _FOLDS
        _FOLDS = train_of  # inherited by the forked workers: nothing pickled but the fold's index and its factors
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            effs = pool.map(_fit_fold, range(len(groups)), chunksize=1)
        _FOLDS = []
    else:
        effs = [fit(t).to_dict() if t else Efficiency().to_dict() for t in train_of]
    resid: dict[int, float] = {}
    fits: dict[str, dict] = {}
    for g, d in zip(groups, effs, strict=True):
        eff = Efficiency(**d)
        fits[g] = d
        test = [i for i, s in enumerate(samples) if group(s) == g]
        for i in test:
            resid[i] = math.log(_predict(samples[i], eff) / samples[i].measured)
        log(f"  held out {g}: {len(test)} rows, fit {d}")
    return resid, fits


_FOLDS: list[list[Sample]] = []


def _fit_fold(k: int) -> dict:
    return fit(_FOLDS[k]).to_dict() if _FOLDS[k] else Efficiency().to_dict()


def error_stats(errors: Iterable[float]) -> dict:
    """n, median and p90 of |error| and the signed median, in per cent, of errors given as fractions (predicted /
    measured - 1): the figures every judge of the model prints (this module, `stride plan --from-csv`,
    benchmarks/perfmodel_blind.py), reckoned one way."""
    e = list(errors)
    if not e:
        return {"n": 0, "median_abs_pct": None, "p90_abs_pct": None, "median_signed_pct": None}
    a = [abs(x) for x in e]
    return {"n": len(e), "median_abs_pct": quantile(a, 0.5) * 100, "p90_abs_pct": quantile(a, 0.9) * 100,
            "median_signed_pct": quantile(e, 0.5) * 100}


def summary(resid: Iterable[float]) -> dict:
    """`error_stats` of residuals r = ln(predicted / measured)."""
    return error_stats(math.exp(r) - 1 for r in resid)


def balanced(resid: dict[int, float], samples: list[Sample]) -> dict:
    """Median and p90 with every source weighing the same (a weighted quantile of |error|)."""
    count: dict[str, int] = {}
    for i in resid:
        count[samples[i].source] = count.get(samples[i].source, 0) + 1
    pts = sorted((abs(math.exp(r) - 1) * 100, 1.0 / count[samples[i].source]) for i, r in resid.items())
    total = sum(w for _, w in pts)

    def wq(q: float) -> float:
        acc = 0.0
        for e, w in pts:
            acc += w
            if acc >= q * total:
                return e
        return pts[-1][0]
    return {"sources": len(count), "median_abs_pct": wq(0.5), "p90_abs_pct": wq(0.9)}


def by(resid: dict[int, float], samples: list[Sample], key: Callable[[Sample], str]) -> dict[str, dict]:
    groups: dict[str, list[float]] = {}
    for i, r in resid.items():
        groups.setdefault(key(samples[i]), []).append(r)
    return {g: summary(v) for g, v in sorted(groups.items())}


def coverage(samples: list[Sample], loso: dict[int, float], loho: dict[int, float],
             group: Callable[[Sample], str]) -> dict:
    """Share of held-out truths inside their 80% interval, the interval built only from residuals
    of rows outside the held-out group (LOSO residuals; LOHO ones for a generation none of them ran)."""
    inside, n, width = 0, 0, []
    for g in {group(s) for s in samples}:
        others = [i for i in loso if group(samples[i]) != g]
        table = IntervalTable.from_residuals([(samples[i].kind, loso[i]) for i in others],
                                             [loho[i] for i in others if i in loho],
                                             [samples[i].source for i in others])
        for i, s in enumerate(samples):
            if group(s) != g or i not in loso:
                continue
            pred = s.measured * math.exp(loso[i])
            q10, q90, _ = table.bounds(s.kind)
            iv = apply(pred, 1.0, q10, q90)
            n += 1
            inside += iv["tokens_per_s_per_gpu_lo"] <= s.measured <= iv["tokens_per_s_per_gpu_hi"]
            width.append(iv["tokens_per_s_per_gpu_hi"] / iv["tokens_per_s_per_gpu_lo"])
    return {"n": n, "coverage": inside / n if n else None,
            "median_width_ratio": quantile(width, 0.5) if width else None}


def memory_errors(samples: list[Sample], effs: dict[str, Efficiency]) -> list[dict]:
    out = []
    for s in samples:
        meas = measured_memory_gib(s.row)
        if meas is None:
            continue
        pred = predict_inputs(s.inputs, effs.get(s.source, Efficiency()))
        got = memory_as_measured(pred, s.inputs.memory_kind)
        out.append({"row_id": s.inputs.row_id, "source": s.source, "kind": s.inputs.memory_kind, "measured_gib": meas,
                    "predicted_gib": got, "err_pct": (got / meas - 1) * 100})
    return out
