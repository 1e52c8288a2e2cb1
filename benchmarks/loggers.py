"""What each experiment tracker costs a training step: TensorBoard, MLflow (local file store), W&B (offline).

The quick-start transformer trains `--steps` steps with one logger on, and with none, alternated
`--repeats` times in one process (each variant starting a round in turn) so machine noise hits all
alike; every step is logged (`metrics.log_every = 1`, the worst case: the default logs every 10th).
Two figures per logger:
- `on_log_us`: the median time of the logger's own `on_log` call per logged record, timed inside the
  real run (a subclass that times the call; the logger is otherwise the one `[metrics]` builds);
- `loop_ms_per_step` and its ratio to no logger: the step loop's wall time per step (summary.json's
  `wall_time_s` / steps; logging happens after a step's timer closes, so it is in the loop, not in
  `step_time_s`).
Set-up (creating the tracking run, logging the config) and the end (summary artifact, flush) are outside
the loop and reported as `fit_s` beside it.

    .venv/bin/python benchmarks/loggers.py [--steps 60] [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stride.config import load_config
from stride.train.trainer import Trainer


def _timed(base: type) -> type:
    class Timed(base):  # type: ignore[misc, valid-type]
        calls: list[float] = []

        def on_log(self, trainer: Any, rec: Mapping[str, Any]) -> None:
            t0 = time.perf_counter()
            super().on_log(trainer, rec)
            self.calls.append(time.perf_counter() - t0)

    return Timed


def _logger(name: str) -> Any:
    """A timed instance of the logger `[metrics]` would build for `name` (None: no logger)."""
    if name == "tensorboard":
        from stride.metrics.observe.tensorboard import TensorBoardCallback

        return _timed(TensorBoardCallback)()
    if name == "mlflow":
        from stride.metrics.observe.mlflow_logger import MLflowCallback

        return _timed(MLflowCallback)()
    if name == "wandb":
        from stride.metrics.observe.wandb_logger import WandbCallback

        return _timed(WandbCallback)()
    return None


def run(name: str, steps: int) -> dict[str, float]:
    cfg = load_config("configs/quickstart.toml", [f"train.steps={steps}", "train.val_every=0", "train.threads=1",
                                                  "metrics.progress=false", "metrics.log_every=1",
                                                  "metrics.system_sample_s=0"])
    logger = _logger(name)
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        s = Trainer(config=cfg, out=Path(d) / "run", callbacks=[logger] if logger else None).fit().summary
        fit_s = time.perf_counter() - t0
    calls = type(logger).calls[-steps:] if logger else []
    return {"loop_ms": 1e3 * s["wall_time_s"] / steps, "fit_s": fit_s,
            "on_log_us": 1e6 * statistics.median(calls) if calls else 0.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--loggers", default="tensorboard,mlflow,wandb")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    names = ["off", *args.loggers.split(",")]
    for name in names:  # warm-up: imports, caches, the first tracking run
        run(name, 3)
    got: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    for i in range(args.repeats):
        for name in names[i % len(names):] + names[:i % len(names)]:  # each starts a round in turn
            got[name].append(run(name, args.steps))
    off = statistics.median(r["loop_ms"] for r in got["off"])
    out = {}
    for name in names:
        loop = statistics.median(r["loop_ms"] for r in got[name])
        out[name] = {"loop_ms_per_step": round(loop, 2), "ratio_to_off": round(loop / off, 3),
                     "on_log_us_median": round(statistics.median(r["on_log_us"] for r in got[name]), 1),
                     "fit_s_median": round(statistics.median(r["fit_s"] for r in got[name]), 2)}
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{'logger':<12} {'loop ms/step':>13} {'ratio':>7} {'on_log us':>10} {'fit s':>7}")
    for name, r in out.items():
        print(f"{name:<12} {r['loop_ms_per_step']:>13.2f} {r['ratio_to_off']:>7.3f} {r['on_log_us_median']:>10.1f} "
              f"{r['fit_s_median']:>7.2f}")


if __name__ == "__main__":
    main()
