"""benchmarks/activation_checkpointing.py, the source of the README's activation-checkpointing row, runs (a smoke
run: the time ratios of 4-step runs measure nothing) and prints the saved-activation bytes the README quotes, which
are exact on any host."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_script_prints_the_readmes_saved_bytes_and_a_ratio_per_mode() -> None:
    out = subprocess.run([sys.executable, "benchmarks/activation_checkpointing.py", "--quick", "--json"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.splitlines()[-1])
    tiny, small = r["tiny"], r["small"]
    # README: 11.7 MB -> 6.3 MB (every 2nd) -> 0.93 MB (full); small 94.6 MB -> 7.4 MB (full)
    assert [tiny[m]["saved_activation_bytes"] for m in ("none", "every_k", "full")] == [11_731_456, 6_332_928, 934_400]
    assert round(small["none"]["saved_activation_bytes"] / 1e6, 1) == 94.6
    assert round(small["full"]["saved_activation_bytes"] / 1e6, 1) == 7.4
    assert [tiny[m]["checkpointed_blocks"] for m in ("none", "every_k", "full")] == [0, 2, 4]
    assert len(tiny["full"]["ratio_per_round"]) == 2 and min(tiny["full"]["ratio_per_round"]) > 0  # 2 rounds (--quick)
    assert "family" in r["cpu"]
