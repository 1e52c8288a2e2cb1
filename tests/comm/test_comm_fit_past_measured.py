"""A fitted bandwidth above every measured one is a latency floor's slope, not a link (outside audit 21, L3: gloo
send_recv timings flat at ~4 ms from 4 KB to 512 KB fitted 6.87 GB/s where no size passed 3.02 GB/s)."""

from __future__ import annotations

from stride.comm.fit import fit_alpha_beta
from stride.comm.hwprofile import unresolved


def _table(sizes: list[int], times: list[float]) -> dict:
    ab = fit_alpha_beta(sizes, times)
    return {"beta_us_per_byte": ab.beta_us_per_byte, "fit_r2": ab.r2, "sizes_bytes": sizes, "time_us": times}


def test_a_floor_with_a_little_slope_is_left_out_naming_both_bandwidths() -> None:
    sizes = [4096 * 2**k for k in range(8)]  # 4 KB .. 512 KB
    times = [3900.0 + s * 2e-3 + (250.0 if k % 2 else -250.0) for k, s in enumerate(sizes)]  # 0.5 < r2 < 0.9
    why = unresolved(_table(sizes, times))
    assert why is not None and "above every measured size" in why


def test_a_bandwidth_bound_sweep_is_kept() -> None:
    sizes = [2**k for k in range(12, 27)]  # 4 KB .. 64 MB at 3 GB/s after 100 us
    times = [100.0 + s / 3e3 for s in sizes]
    assert unresolved(_table(sizes, times)) is None


def test_a_clean_fit_of_a_fast_link_at_a_short_sweep_is_kept() -> None:
    """NVLink-like: 40 us, 330 GB/s, measured to 16 MB (182 GB/s there): a clean line, kept (review L2)."""
    sizes = [2**k for k in range(16, 25)]
    times = [40.0 + s / 330e3 for s in sizes]
    assert unresolved(_table(sizes, times)) is None
