"""The development machines' shared data beside the checkout (`../shared`): sample profiler traces (HTA's test data, a
CPU gloo trace), accelerator datasheets. It is not part of the repository, so a clone has none: the tests that read it
skip with `MISSING`'s reason (outside audit 12, F2: the old reasons did not say what ../shared is) and run where it is.
"""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
TRACES = SHARED / "traces"
PERFMODEL = SHARED / "perfmodel"
MISSING = ("not found: ../shared is the development machines' data beside the checkout (sample profiler traces, "
           "datasheets), not part of a clone; these tests run where it is")


def need_shared(path: Path) -> Path:
    """`path` under ../shared, or a skip that says what ../shared is."""
    if not path.exists():
        pytest.skip(f"../shared/{path.relative_to(SHARED)} {MISSING}")
    return path
