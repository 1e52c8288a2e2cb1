"""A run's CPU peak memory is its own: not the high-water mark an earlier run in the process left.

`stride bench` trains every workload and variant in one process; before the reset its table gave
mlp_tiny the transformer's 488 MiB and the tradeoff matrix gave activation checkpointing a peak-memory
ratio of 1.01x next to an activation ratio of 0.11x (AMD EPYC, 2 cores).
"""

from __future__ import annotations

import os
import sys

import pytest
import torch
from helpers import small_config

from stride.metrics.memory import peak_memory, reset_peak
from stride.train.trainer import Trainer

MIB = 2**20
BIG = 400 * MIB
CPU = torch.device("cpu")

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not os.access("/proc/self/clear_refs", os.W_OK),
    reason="the peak RSS can be reset only on Linux with a writable /proc/self/clear_refs")


def _touch_and_free(nbytes: int) -> None:
    """Raise the process's RSS by `nbytes` (every page written), then give the memory back."""
    t = torch.ones(nbytes // 4, dtype=torch.float32)
    assert float(t[-1]) == 1.0
    del t


def test_reset_peak_starts_a_new_cpu_high_water_mark() -> None:
    _touch_and_free(BIG)
    before, kind = peak_memory(CPU)
    assert kind == "process_peak_rss"
    reset_peak(CPU)
    after, _ = peak_memory(CPU)
    assert after < before - BIG // 2, (before / MIB, after / MIB)  # the freed 400 MiB is no longer the peak
    _touch_and_free(BIG // 4)
    again, _ = peak_memory(CPU)
    assert again >= after + BIG // 4 - 16 * MIB  # and it still records what comes after the reset


def test_reset_peak_gives_freed_heap_pages_back_first() -> None:
    """Blocks below glibc's mmap threshold, freed under a live one, stay resident until the heap is trimmed."""
    blocks = [bytearray(b"\1") * (64 * 1024) for _ in range(BIG // (64 * 1024))]
    sentinel = bytearray(b"\1") * (64 * 1024)  # above them on the heap: free() alone cannot shrink it
    held, _ = peak_memory(CPU)
    del blocks
    reset_peak(CPU)
    after, _ = peak_memory(CPU)
    assert after < held - BIG // 2, (held / MIB, after / MIB)  # without the trim the 400 MiB stayed the peak
    assert sentinel[-1] == 1


def test_a_runs_peak_memory_is_not_an_earlier_runs() -> None:
    _touch_and_free(BIG)
    lifetime, _ = peak_memory(CPU)
    summary = Trainer(config=small_config(), write_run_dir=False).fit().summary
    assert summary["peak_mem_kind"] == "process_peak_rss"
    # a tiny model on 4 assets needs far less than the 400 MiB allocated (and freed) before it
    assert summary["peak_mem_bytes"] < lifetime - BIG // 2, (lifetime / MIB, summary["peak_mem_bytes"] / MIB)
