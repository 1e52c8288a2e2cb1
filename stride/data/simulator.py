"""Market simulator: bars and an L2 book for many assets, written as Parquet partitioned by date and symbol.

What it models, and why each matters to a loader or a model: correlated returns (a market factor
and sector factors, so cross-asset features carry information), Student-t shocks (fat tails),
GARCH(1,1) variance per asset carried across days (volatility clustering), a U-shaped intraday
profile of volatility and volume, an overnight gap, rare jumps, and an L2 book on a tick grid whose
best bid and ask straddle the mid exactly (mid = (bid_1 + ask_1) / 2), with the spread widening
with volatility. Deterministic by seed: day d draws from `default_rng([seed, d])`, and state
(variance, price) flows from day to day. Memory is one day of all assets, whatever `days` is.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stride.errors import StrideError
from stride.files.owner import remove_abandoned, tagged_name

SESSION_OPEN_UTC = np.timedelta64(14 * 60 + 30, "m")  # 09:30 New York (EST), ignoring daylight saving
SESSION_SECONDS = 390 * 60
_UNITS = {"s": 1, "sec": 1, "min": 60, "m": 60, "h": 3600}
# Written last into a finished output: what `--overwrite` may replace, and what ingest checks a synth tree for.
# A leading underscore: pyarrow datasets skip it, as they skip `_SUCCESS`.
MARKER, MARKER_FORMAT = "_stride_synth.json", "stride-synth"
LEFTOVER = re.compile(r"^synth-[0-9a-f]{8}-")  # the rest of a tagged temporary name of a synth


def parse_freq(freq: str) -> int:
    """'1min', '5min', '30s', '30min' -> seconds per bar (must divide the 6.5 h session: no whole hour does)."""
    m = re.fullmatch(r"(\d+)\s*(s|sec|min|m|h)", freq.strip())
    if not m:
        raise ValueError(f"frequency {freq!r}: expected a number and a unit, e.g. 1min, 5min, 30s, 30min")
    sec = int(m.group(1)) * _UNITS[m.group(2)]
    if sec <= 0 or SESSION_SECONDS % sec:
        raise ValueError(f"frequency {freq!r} ({sec} s) does not divide the {SESSION_SECONDS} s session")
    return sec


def trading_days(start: str, n: int) -> np.ndarray:
    """n weekdays from `start` (holidays are not modelled)."""
    return np.busday_offset(np.datetime64(start, "D"), np.arange(n), roll="forward")


@dataclass
class SimParams:
    levels: int = 5
    tick: float = 0.01
    n_sectors: int = 4
    market_corr: float = 0.35  # share of variance from the market factor
    sector_corr: float = 0.15
    garch: tuple[float, float, float] = (0.05, 0.08, 0.90)  # omega, alpha, beta on unit-variance shocks
    tail_df: float = 4.0
    daily_vol: float = 0.02
    jump_rate_per_day: float = 0.5
    jump_sd_daily_vols: float = 0.5
    overnight_var_bars: float = 30.0  # overnight variance, in bars' worth


def _t(rng: np.random.Generator, df: float, size: tuple[int, ...]) -> np.ndarray:
    return rng.standard_t(df, size=size) / np.sqrt(df / (df - 2))


class MarketSimulator:
    """Generates one day of all assets at a time; `days()` yields (date, {column: [A, bars] array})."""

    def __init__(self, n_assets: int, n_days: int, freq: str = "1min", seed: int = 0, start: str = "2024-01-02",
                 params: SimParams | None = None) -> None:
        if n_assets < 1 or n_days < 1:
            raise ValueError(f"need at least one asset and one day, got assets={n_assets}, days={n_days}")
        self.n_assets, self.n_days, self.seed = n_assets, n_days, seed
        self.bar_s = parse_freq(freq)
        self.bars = SESSION_SECONDS // self.bar_s
        self.p = params or SimParams()
        self.dates = trading_days(start, n_days)
        self.symbols = [f"S{i:03d}" for i in range(n_assets)]
        rng = np.random.default_rng([seed, 10**6])
        p = self.p
        self.sector = rng.integers(0, p.n_sectors, n_assets)
        self.beta = rng.uniform(0.6, 1.4, n_assets)
        self.start_price = np.exp(rng.uniform(np.log(10), np.log(300), n_assets))
        tod = (np.arange(self.bars) + 0.5) / self.bars
        self.season = 0.7 + 1.2 * (2 * tod - 1) ** 2  # U shape
        self.season /= np.sqrt(np.mean(self.season**2))  # keeps the daily variance
        self.bar_vol = p.daily_vol / np.sqrt(self.bars)
        omega, alpha, beta = p.garch
        self.var = np.full(n_assets, omega / (1 - alpha - beta))
        self.eps = np.zeros(n_assets)
        self.log_price = np.log(self.start_price)

    def _shocks(self, rng: np.random.Generator) -> np.ndarray:
        a, n, p = self.n_assets, self.bars, self.p
        market = _t(rng, p.tail_df, (1, n))
        sectors = _t(rng, p.tail_df, (p.n_sectors, n))[self.sector]
        idio = _t(rng, p.tail_df, (a, n))
        w_m = np.sqrt(p.market_corr) * self.beta[:, None] / np.sqrt(np.mean(self.beta**2))
        w_s = np.sqrt(p.sector_corr)
        w_i = np.sqrt(np.maximum(1 - w_m**2 - w_s**2, 0.05))
        return w_m * market + w_s * sectors + w_i * idio

    def day(self, d: int) -> dict[str, np.ndarray]:
        """Columns for day d, each [assets, bars]; advances the carried state."""
        rng = np.random.default_rng([self.seed, d])
        a, n, p = self.n_assets, self.bars, self.p
        z = self._shocks(rng)
        omega, alpha, beta = p.garch
        ret = np.empty((a, n))
        var_path = np.empty((a, n))
        var, eps = self.var, self.eps
        for t in range(n):  # GARCH is sequential in time, vectorised across assets
            var = omega + alpha * eps**2 + beta * var
            eps = np.sqrt(var) * z[:, t]
            ret[:, t] = eps
            var_path[:, t] = var
        self.var, self.eps = var, eps
        vol = self.bar_vol * np.sqrt(var_path) * self.season  # per-bar volatility in log-price
        ret = ret * self.bar_vol * self.season
        jumps = rng.random((a, n)) < p.jump_rate_per_day / n
        ret += jumps * rng.standard_normal((a, n)) * p.jump_sd_daily_vols * p.daily_vol
        gap = rng.standard_normal(a) * self.bar_vol * np.sqrt(p.overnight_var_bars) * (d > 0)
        log_open = self.log_price + gap
        log_close = log_open[:, None] + np.cumsum(ret, axis=1)
        self.log_price = log_close[:, -1]
        close_latent = np.exp(log_close)
        prev = np.concatenate([np.exp(log_open)[:, None], close_latent[:, :-1]], axis=1)
        wick = np.abs(rng.standard_normal((a, n, 2))) * vol[..., None] * 0.5
        high = np.maximum(prev, close_latent) * np.exp(wick[..., 0])
        low = np.minimum(prev, close_latent) * np.exp(-wick[..., 1])
        volume = np.round(np.exp(rng.normal(8.0, 0.5, (a, n))) * self.season**2 * np.sqrt(var_path))
        # Book: spread in ticks grows with volatility; best quotes on the tick grid straddle the mid.
        tick = p.tick
        spread_ticks = np.maximum(1, np.round(0.3 * vol * close_latent / tick)).astype(np.int64)
        bid1 = np.floor((close_latent - spread_ticks * tick / 2) / tick) * tick
        ask1 = bid1 + spread_ticks * tick
        mid = (bid1 + ask1) / 2
        out: dict[str, np.ndarray] = {
            "open": prev, "high": np.maximum(high, mid), "low": np.minimum(low, mid), "close": mid,
            "volume": volume, "mid": mid, "spread": ask1 - bid1,
        }
        depth = np.exp(rng.normal(6.0, 0.6, (a, n, 2, p.levels))) * (1 + 0.5 * np.arange(p.levels))
        depth *= self.season[None, :, None, None]
        for k in range(p.levels):
            out[f"bid_px_{k + 1}"] = bid1 - k * tick
            out[f"ask_px_{k + 1}"] = ask1 + k * tick
        for k in range(p.levels):
            out[f"bid_sz_{k + 1}"] = np.round(depth[:, :, 0, k])
            out[f"ask_sz_{k + 1}"] = np.round(depth[:, :, 1, k])
        return out

    def timestamps(self, d: int) -> np.ndarray:
        """Bar end times (UTC, ns) of day d."""
        base = self.dates[d].astype("datetime64[ns]") + SESSION_OPEN_UTC.astype("timedelta64[ns]")
        return base + (np.arange(1, self.bars + 1) * self.bar_s).astype("timedelta64[s]").astype("timedelta64[ns]")

    def days(self) -> Iterator[tuple[np.datetime64, np.ndarray, dict[str, np.ndarray]]]:
        for d in range(self.n_days):
            yield self.dates[d], self.timestamps(d), self.day(d)


class SynthError(StrideError, ValueError):
    """An --out that synth may not write: names the folder and why."""

    exit_code = 2


def synth_marker(path: Path) -> dict[str, Any] | None:
    """The completion marker of a finished synth output in `path`, or None (none, unreadable, another format)."""
    try:
        m = json.loads((path / MARKER).read_text())
    except (OSError, ValueError, RecursionError):
        return None
    return m if isinstance(m, dict) and m.get("format") == MARKER_FORMAT else None


def _existing(out: Path, overwrite: bool) -> str:
    """What --out holds: "none", "empty" (a folder, used as it is) or "synth" (a finished synth output, replaced
    with `overwrite`); anything else is a SynthError naming the folder."""
    if not os.path.lexists(out):
        return "none"
    if out.is_symlink() or not out.is_dir():
        what = "a symbolic link" if out.is_symlink() else "not a directory"
        raise SynthError(f"--out {out} is {what}: give a new or empty folder, or an earlier synth output")
    from stride.data.store import empty_but

    if empty_but(out, rest=LEFTOVER):  # nothing, or only a killed synth's temporary folder (removed)
        return "empty"
    if synth_marker(out) is not None:
        if overwrite:
            return "synth"
        raise SynthError(f"--out {out} holds an earlier `stride data synth` output (pass --overwrite to replace it)")
    from stride.data.store import is_store

    what = "a stride store" if is_store(out) else f"not empty and not a `stride data synth` output (no {MARKER})"
    raise SynthError(f"--out {out} is {what}: synth writes a new or empty folder, and --overwrite replaces only an "
                     "earlier synth output; choose another --out or remove it yourself")


def synthesize(out: str | Path, n_assets: int = 64, n_days: int = 250, freq: str = "1min", seed: int = 0,
               levels: int = 5, overwrite: bool = False) -> dict[str, int]:
    """Write `out/date=YYYY-MM-DD/symbol=SNNN/part-0.parquet`, one day at a time, and `out/_stride_synth.json`;
    returns counts.

    The tree is built in a tagged temporary folder (`.tmp-stride-<host>-<pid>-synth-...`) beside `out`, its marker
    written last, and renamed into place; in an empty `out` it is built inside it and its entries moved up
    (`store.fill_empty`). An interrupted synth (Ctrl-C, a crash: the folder is removed; kill -9: the next synth
    there removes it, and ingest refuses it) never leaves a half tree at `out`. `overwrite` replaces only an
    earlier synth output (its marker).
    """
    out = Path(out)
    old = _existing(out, overwrite)
    sim = MarketSimulator(n_assets, n_days, freq, seed, params=SimParams(levels=levels))
    whole = Path(os.path.abspath(out))  # `--out .`: its Path.parent is itself
    whole.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned(whole.parent, rest=LEFTOVER)  # killed syntheses' folders (their process is gone)
    # beside the folder, or inside an empty one: filled in place, on its own filesystem (store.fill_empty)
    tmp = (whole if old == "empty" else whole.parent) / tagged_name("tmp", f"synth-{uuid.uuid4().hex[:8]}-{whole.name}")
    trash = whole.parent / tagged_name("trash", f"synth-{uuid.uuid4().hex[:8]}-{whole.name}")
    files = rows = 0
    try:
        tmp.mkdir()
        for date, ts, cols in sim.days():
            for i, sym in enumerate(sim.symbols):
                part = tmp / f"date={date}" / f"symbol={sym}"
                part.mkdir(parents=True, exist_ok=True)
                table = pa.table({"timestamp": pa.array(ts, pa.timestamp("ns", "UTC")), "symbol": [sym] * len(ts),
                                  **{k: v[i] for k, v in cols.items()}})
                pq.write_table(table, part / "part-0.parquet")
                files += 1
                rows += len(ts)
        info = {"files": files, "rows": rows, "assets": n_assets, "days": n_days, "bars_per_day": sim.bars}
        (tmp / MARKER).write_text(json.dumps({"format": MARKER_FORMAT, "version": 1, **info, "freq": freq,
                                              "seed": seed, "levels": levels, "start": str(sim.dates[0])}, indent=1))
        from stride.data.store import empty_but, fill_empty, swap_in

        if old == "synth":
            if synth_marker(out) is None:  # checked at the start too; the folder may have changed since
                raise SynthError(f"--out {out} is no longer a `stride data synth` output: not replaced")
            swap_in(tmp, out, trash)  # stopped between its two renames: the earlier output back in place
        elif old == "empty":
            if not empty_but(out, own=tmp):
                raise SynthError(f"--out {out} is no longer empty: not written into")
            fill_empty(tmp, out, MARKER)  # filled in place: `--out .` or a mount point cannot be renamed over
        else:
            tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(trash, ignore_errors=True)
    return info
