"""Hardware profile TOML: per-collective alpha-beta fits, the format `docs/analyze.md` documents.

Written by hand (the format is flat: one `[meta]` table, one `[collectives.<name>]` table each) so
no TOML-writing package is needed; read it with `tomllib`.
"""

from __future__ import annotations

import math
import os
import platform
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import torch

from stride.comm.bench import Row
from stride.comm.collectives import COLLECTIVES
from stride.comm.fit import fit_alpha_beta
from stride.comm.fit_quality import MIN_R2

FORMAT = "stride-hwprofile-1"


def _val(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"hardware profile: non-finite value {v}")
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_val(x) for x in v) + "]"
    raise TypeError(f"hardware profile: cannot write {type(v).__name__}")


def profile_tables(rows: list[Row], backend: str, world: int) -> dict[str, dict]:
    meta = {
        "format": FORMAT, "backend": backend, "world_size": world, "dtype": "float32",
        "device": "cuda" if backend == "nccl" else "cpu", "host": platform.node(), "torch": torch.__version__,
        "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    tables: dict[str, dict] = {"meta": meta}
    for name in COLLECTIVES:
        mine = [r for r in rows if r.collective == name and r.correct]
        if len({r.bytes for r in mine}) < 2:
            continue
        ab = fit_alpha_beta([r.bytes for r in mine], [r.time_us for r in mine])
        factor = COLLECTIVES[name].bus_factor(world)
        bw = ab.bandwidth_GBps
        tables[f"collectives.{name}"] = {
            "alpha_us": ab.alpha_us, "beta_us_per_byte": ab.beta_us_per_byte,
            "algbw_GBps": bw if bw is not None else 0.0, "busbw_GBps": bw * factor if bw is not None else 0.0,
            "bus_factor": factor, "fit_r2": ab.r2,
            "sizes_bytes": [r.bytes for r in mine], "time_us": [r.time_us for r in mine],
        }
    return tables




# a fitted bandwidth this far above the best any measured size reached is the slope of a latency floor, not a link
BANDWIDTH_PAST_MEASURED = 1.5
CLEAN_R2 = 0.9


def unresolved(fit: dict) -> str | None:
    """Why a fit cannot go into a profile, or None if it can. The planner refuses a profile with beta = 0
    (a link that moves bytes in no time), and the fit holds beta at 0 where time did not grow with size. A fit
    with R^2 below MIN_R2 (NaN included) is left out too: its beta is noise, and the planner would read it as a
    bandwidth (gloo send_recv on timings of 79-3966 us with no size trend wrote busbw 0.019 GB/s at R^2 -0.53)."""
    if fit["beta_us_per_byte"] <= 0:
        sizes = fit.get("sizes_bytes") or [0]
        return f"bandwidth not resolved (time did not grow with size, {min(sizes):,}-{max(sizes):,} B)"
    r2 = fit.get("fit_r2")
    if not (isinstance(r2, int | float) and r2 >= MIN_R2):
        return (f"bandwidth not resolved (the fitted line explains under {MIN_R2:.0%} of the timings' variance, "
                f"r2 below {MIN_R2}: noise)")
    seen = [b / t * 1e-3 for b, t in zip(fit.get("sizes_bytes") or [], fit.get("time_us") or [], strict=False) if t > 0]
    bw = 1e-3 / fit["beta_us_per_byte"]
    # gloo send_recv: 6.87 GB/s fitted at r2 0.66, 3.02 at most measured; a clean fit (r2 >= CLEAN_R2) is kept, as
    # a fast link's at a short sweep (NVLink: 330 GB/s fitted, 182 measured at 16 MB) is
    if seen and r2 < CLEAN_R2 and bw > BANDWIDTH_PAST_MEASURED * max(seen):
        return (f"bandwidth not resolved (the fit's {bw:.3g} GB/s is above every measured size's {max(seen):.3g} GB/s "
                f"by more than {BANDWIDTH_PAST_MEASURED:g}x: a latency floor set its slope, audit 21 L3)")
    return None


def writable(tables: dict[str, dict]) -> tuple[dict[str, dict], dict[str, str]]:
    """(the tables a profile may hold, {collective: why left out}): one noisy collective must not make
    the whole profile unreadable."""
    keep, left_out = {}, {}
    for key, kv in tables.items():
        why = unresolved(kv) if key.startswith("collectives.") else None
        if why:
            left_out[key.removeprefix("collectives.")] = why
        else:
            keep[key] = kv
    return keep, left_out


def write_profile(path: str | Path, tables: dict[str, dict],
                  validate: Callable[[Path], object] | None = None) -> Path:
    """Write the `writable` part of `tables` atomically (temp file + rename), so a half-written profile is never
    read as valid. `validate` reads the temp file before the rename (the CLI passes the planner's reader, which
    this layer may not import), so a profile the planner would refuse is never written: it raises, no file."""
    p = Path(path)
    lines = ["# stride hardware profile: collective latency (alpha) and inverse bandwidth (beta) from `stride comm`",
             "# time(bytes) = alpha_us + beta_us_per_byte * bytes; bytes as nccl-tests counts them", ""]
    for table, kv in writable(tables)[0].items():
        lines.append(f"[{table}]")
        lines.extend(f"{k} = {_val(v)}" for k, v in kv.items())
        lines.append("")
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=p.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write("\n".join(lines))
        if validate:
            validate(Path(tmp))
        os.replace(tmp, p)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return p
