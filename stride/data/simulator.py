"""Market simulator: bars and an L2 book for many assets, written as Parquet partitioned by date and symbol.

What it models, and why each matters to a loader or a model: correlated returns (a market factor
and sector factors, so cross-asset features carry information), Student-t shocks (fat tails),
GARCH(1,1) variance per asset carried across days (volatility clustering), a U-shaped intraday
profile of volatility and volume, an overnight gap, rare jumps, and an L2 book on a tick grid whose
best bid and ask straddle the mid exactly (mid = (bid_1 + ask_1) / 2), with the spread widening
with volatility. Deterministic by seed: day d draws from `default_rng([seed, d])`, and state
(variance, price) flows from day to day. Memory is one day of all assets, whatever `days` is.

That day is large at fine bars (`--assets 100000 --freq 1s` holds about 856 GiB of it; the process was killed for
memory after 9 s, without a word, leaving its temporary folder): `synthesize` estimates the day's peak and the
output's size from the shape before it allocates or writes anything and refuses, in one line, what cannot fit.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
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
    m = re.fullmatch(r"([+-]?\d+)\s*(s|sec|min|m|h)", freq.strip())
    if not m:
        raise ValueError(f"frequency {freq!r}: expected a number and a unit, e.g. 1min, 5min, 30s, 30min")
    sec = int(m.group(1)) * _UNITS[m.group(2)]
    if sec <= 0:  # 0 "did not divide the session" (audit of 2026-12-07), -1min "expected a number"
        raise ValueError(f"frequency {freq!r} ({sec} s): a bar length must be positive, e.g. 1min, 5min, 30s, 30min")
    if SESSION_SECONDS % sec:
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


class SynthTooLarge(StrideError, ValueError):
    """A synth that cannot fit this host's memory or its disk: what it needs, what is there, and what to lower."""

    exit_code = 2  # as `stride train` refuses a run that does not fit: the options are what must change


# Bytes `MarketSimulator.day` holds at its peak per (asset, bar) cell: float64 arrays alive at once, 19 for the
# bars (shocks, returns, variance path, prices, wicks, quotes, ...) and 6 per book level (its two prices, the depth
# draws and the two rounded sizes), plus the jumps' bool mask. Measured with tracemalloc: 153, 201, 393 and 633 B
# at --levels 0, 1, 5, 10 (200 assets x 390 bars and 50 x 23400 alike); RSS peaks measured lower (pages of
# `np.empty` never touched). Besides, per asset: its state (six arrays of one value) and its symbol; per bar: the
# market and sector shocks and the intraday profile, whatever the assets.
DAY_ARRAYS, LEVEL_ARRAYS, CELL_EXTRA, ASSET_BYTES, BAR_BYTES = 19, 6, 1, 128, 128
# A floor on the Parquet output, measured over 1s..390min bars and 0..10 levels: 2.1 to 390 B a value (1s bars
# compress most: their prices repeat), 2.7 to 14.5 KB of footer and metadata a file (about 150 B a column).
VALUE_BYTES_FLOOR, FILE_BYTES_FLOOR, COLUMN_META_FLOOR = 1.5, 1500, 150
# Coarser bar lengths offered when --freq is too fine (each divides the 6.5 h session).
FREQS = ("1s", "5s", "10s", "15s", "30s", "1min", "5min", "10min", "15min", "30min", "65min", "390min")


def columns(levels: int) -> int:
    """Value columns a synth file holds (timestamp and symbol aside): 7 bar columns, 4 per book level."""
    return 7 + 4 * levels


def cell_bytes(levels: int) -> int:
    """Peak bytes a day's simulation holds per (asset, bar) cell (see DAY_ARRAYS)."""
    return 8 * (DAY_ARRAYS + LEVEL_ARRAYS * levels) + CELL_EXTRA


def day_bytes(n_assets: int, bars: int, levels: int) -> int:
    """Peak bytes of simulating one day of `n_assets` x `bars`."""
    return n_assets * (bars * cell_bytes(levels) + ASSET_BYTES) + bars * BAR_BYTES


def output_bytes(n_assets: int, n_days: int, bars: int, levels: int) -> int:
    """A floor on the bytes the Parquet tree takes: one file per asset and day."""
    cols = columns(levels)
    per_file = FILE_BYTES_FLOOR + COLUMN_META_FLOOR * cols + int(bars * (cols + 1) * VALUE_BYTES_FLOOR)
    return n_assets * n_days * per_file


def _free_space(path: Path) -> tuple[int, int | None]:
    """(bytes, inodes) free to this user on the filesystem of `path` (its nearest existing folder); inodes None
    where the filesystem does not count them (btrfs, some network mounts)."""
    where = next((q for q in (path, *path.parents) if q.is_dir()), Path("/"))
    st = os.statvfs(where)
    return st.f_bavail * st.f_frsize, (st.f_favail if st.f_files else None)


def check_room(out: Path, n_assets: int, n_days: int, freq: str, levels: int) -> None:
    """Refuse (SynthTooLarge, one line) a synth whose day does not fit the memory available now or whose output
    does not fit the disk at `out`; nothing is allocated. The available memory is `stride train`'s
    (stride.files.host.available_memory_bytes), so both commands say the same of one host."""
    from stride.files import host

    bars = SESSION_SECONDS // parse_freq(freq)
    if n_assets < 1 or n_days < 1 or levels < 0:
        return  # MarketSimulator says what is wrong with them
    need, have = day_bytes(n_assets, bars, levels), host.available_memory_bytes()
    size = host.binary_size
    shape = f"--assets {n_assets} x --freq {freq} ({bars} bar{'s' if bars > 1 else ''} a day) x --levels {levels}"
    if need > have:
        cell = cell_bytes(levels)
        fixes = []
        most = max(have - bars * BAR_BYTES, 0) // (bars * cell + ASSET_BYTES)
        fixes.append(f"--assets {most} or fewer" if most else "fewer --assets")
        coarser = [f for f in FREQS if parse_freq(f) > SESSION_SECONDS // bars]
        fits = next((f for f in coarser if day_bytes(n_assets, SESSION_SECONDS // parse_freq(f), levels) <= have),
                    None)
        if fits is not None:
            fixes.append(f"a coarser --freq ({fits} fits)")
        if levels and day_bytes(n_assets, bars, 0) <= have:
            fixes.append("fewer --levels (0: bars only, fits)")
        elif levels:
            fixes.append("fewer --levels")
        raise SynthTooLarge(
            f"{shape} does not fit in memory: the simulator holds one day of every asset at once, about "
            f"{size(need)} ({n_assets} x {bars} cells x {cell} B: {columns(levels)} columns and their "
            f"intermediates in float64), and {size(have)} is available; use {', '.join(fixes[:-1])}"
            f"{' or ' if len(fixes) > 1 else ''}{fixes[-1]} (--days does not change the memory: days are written "
            "one at a time)")
    disk, inodes = _free_space(Path(os.path.abspath(out)))
    files = n_assets * n_days
    written = output_bytes(n_assets, n_days, bars, levels)
    if written > disk:
        lower = "--days, --assets or --levels" if levels else "--days or --assets"
        raise SynthTooLarge(
            f"{shape} x --days {n_days} does not fit on the disk of --out {out}: its {files:,} Parquet files take at "
            f"least {size(written)} and {size(disk)} is free; lower {lower}, use a coarser --freq, or another --out")
    entries = 2 * files + n_days + 1  # a file and a symbol folder per asset and day, a date folder a day
    if inodes is not None and entries > inodes:
        raise SynthTooLarge(
            f"{shape} x --days {n_days} does not fit on the disk of --out {out}: it makes {entries:,} files and "
            f"folders (one file per asset and day) and the filesystem has room for {inodes:,} more; lower --days or "
            "--assets, or use another --out")


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
               levels: int = 5, overwrite: bool = False,
               progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
    """Write `out/date=YYYY-MM-DD/symbol=SNNN/part-0.parquet`, one day at a time, and `out/_stride_synth.json`;
    returns counts.

    The tree is built in a tagged temporary folder (`.tmp-stride-<host>-<pid>-synth-...`) beside `out`, its marker
    written last, and renamed into place; in an empty `out` it is built inside it and its entries moved up
    (`store.fill_empty`). An interrupted synth (Ctrl-C, a crash: the folder is removed; kill -9: the next synth
    there removes it, and ingest refuses it) never leaves a half tree at `out`. `overwrite` replaces only an
    earlier synth output (its marker). A synth whose day does not fit in memory, or whose output does not fit the
    disk, is refused first (`check_room`). `progress(files written, files in all)` is called before the first
    file and after each.
    """
    out = Path(out)
    old = _existing(out, overwrite)
    check_room(out, n_assets, n_days, freq, levels)
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
        total = n_assets * n_days
        if progress is not None:
            progress(0, total)
        for date, ts, cols in sim.days():
            for i, sym in enumerate(sim.symbols):
                part = tmp / f"date={date}" / f"symbol={sym}"
                part.mkdir(parents=True, exist_ok=True)
                table = pa.table({"timestamp": pa.array(ts, pa.timestamp("ns", "UTC")), "symbol": [sym] * len(ts),
                                  **{k: v[i] for k, v in cols.items()}})
                pq.write_table(table, part / "part-0.parquet")
                files += 1
                rows += len(ts)
                if progress is not None:
                    progress(files, total)
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
