"""Do the local check's models run their GEMMs at different fractions of the probe's matmul peak?

The local CPU check (stride.perfmodel.local_check) fits one `gemm` efficiency on a tiny transformer and an
MLP and predicts a 4x larger transformer and a larger-batch MLP too slow. If a CPU GEMM's throughput
depended on its shape enough, one factor fitted on tiny shapes would overcharge larger ones. This records the
matmul shapes (mm/addmm/bmm/baddbmm) of one forward + backward of each model at its batch, then times each
model's whole GEMM list and the probe's 1024^3 matmul in interleaved rounds, one pinned thread, and prints
each model's GEMM throughput as a ratio to the 1024^3 rate (median of the per-round ratios).

    .venv/bin/python benchmarks/local_gemm_shapes.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from stride.config import load_config
from stride.perfmodel.census_workload import census_inputs
from stride.perfmodel.local_check import MLP, TS_SMALL, TS_TINY

_MM = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default,
       torch.ops.aten.baddbmm.default}
_BIAS_FIRST = {torch.ops.aten.addmm.default, torch.ops.aten.baddbmm.default}
CASES = {"tiny-b32": (TS_TINY, 32), "tiny-b64": (TS_TINY, 64), "small-b32": (TS_SMALL, 32),
         "mlp-b128": (MLP, 128), "mlp-b256": (MLP, 256)}
Shape = tuple[int, int, int, int]  # batch, m, k, n


class _Shapes(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count: collections.Counter[Shape] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        if func in _MM:
            a, b = (args[1], args[2]) if func in _BIAS_FIRST else (args[0], args[1])
            bt, m, k = (1, *a.shape) if a.dim() == 2 else tuple(a.shape)
            self.count[(int(bt), int(m), int(k), int(b.shape[-1]))] += 1
        return func(*args, **(kwargs or {}))


def gemm_shapes(overrides: list[str], batch: int) -> collections.Counter[Shape]:
    """Matmul shapes (with counts) of one forward + backward of the run config's model and loss."""
    ci = census_inputs(load_config(overrides=[*overrides, f"train.batch_size={batch}"]))
    model = ci.build_model()
    loss = ci.build_loss(model)
    x, y = torch.randn(ci.x_shape), torch.randn(ci.y_shape)
    rec = _Shapes()
    with rec:
        out = loss(model(x), y)
        (out[0] if isinstance(out, tuple) else out).backward()
    return rec.count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})
    torch.set_num_threads(1)
    lists = {name: gemm_shapes(list(over), b) for name, (over, b) in CASES.items()}
    lists["ref-1024^3"] = collections.Counter({(1, 1024, 1024, 1024): 4})
    work = {}
    for name, shapes in lists.items():
        ops = [(torch.randn(*((bt,) if bt > 1 else ()), m, k), torch.randn(*((bt,) if bt > 1 else ()), k, n), c)
               for (bt, m, k, n), c in shapes.items()]
        work[name] = (ops, sum(2 * bt * m * k * n * c for (bt, m, k, n), c in shapes.items()))
    rates: dict[str, list[float]] = {name: [] for name in work}
    print(f"CPU: {_cpu()}; load before {_load()}")
    for _ in range(args.rounds):  # interleaved: the machine's load moves
        for name, (ops, flops) in work.items():
            t0 = time.perf_counter()
            for a, b, c in ops:
                for _ in range(c):
                    torch.matmul(a, b)
            rates[name].append(flops / (time.perf_counter() - t0))
    print(f"load after {_load()}")
    ref = rates["ref-1024^3"]
    for name, r in rates.items():
        ratio = statistics.median(x / y for x, y in zip(r, ref, strict=True))
        print(f"{name:11s} {work[name][1]:9.3g} FLOP  median {statistics.median(r) / 1e9:6.1f} GFLOP/s  "
              f"ratio to 1024^3 {ratio:.3f}")


def _load() -> str:
    p = Path("/proc/loadavg")
    return " ".join(p.read_text().split()[:3]) if p.is_file() else "unknown"


def _cpu() -> str:
    p = Path("/proc/cpuinfo")
    lines = p.read_text().splitlines() if p.is_file() else []
    return next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), "unknown")


if __name__ == "__main__":
    main()
