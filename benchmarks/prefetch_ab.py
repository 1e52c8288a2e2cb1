"""Does a prefetch thread pay for itself in training? The same run with `data.prefetch` = 0 and 2, alternated,
and what the probe (`data.prefetch = "auto"`) chose for it: the check behind `probe.PREFETCH_TAKE_SHARE`.

    .venv/bin/python benchmarks/prefetch_ab.py                   # the quick-start model, one torch thread (a core free)
    .venv/bin/python benchmarks/prefetch_ab.py --store DIR --seq-len 128 --batch 256 --model mlp_tiny

Each round trains both settings in a new random order; a step's wall time is timed from step `--skip` on.
Prints the median ms a step of each, the paired ratio prefetch 2 / prefetch 0 (median and range over the
rounds: below 1, the thread pays), the data phase of each, and the probe's choice and reason. `--threads`
is torch's threads: with all cores taken the probe keeps prefetch off without measuring.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead import MODELS, _cfg, _Clock, _StrideClock  # noqa: E402  (beside this file)

from stride.data.probe import cpu_name  # noqa: E402
from stride.train.trainer import Trainer  # noqa: E402


def train(args: argparse.Namespace, prefetch: str) -> dict[str, object]:
    extra = ['data.source="store"', f'data.store="{args.store}"'] if args.store else []
    extra += [f"data.seq_len={args.seq_len}"] if args.seq_len else []
    extra += [f"train.batch_size={args.batch}"] if args.batch else []
    clock = _Clock(args.skip)  # overhead.py's: wall time from the end of step `skip` to the last
    with tempfile.TemporaryDirectory() as d:
        s = Trainer(config=_cfg(args.model, args.steps, args.threads, (*extra, f"data.prefetch={prefetch}")),
                    out=d, callbacks=[_StrideClock(clock)]).fit().summary
    wall = clock.result(0.0)[0]
    return {"ms_per_step": wall / (args.steps - args.skip) * 1e3,
            "data_ms_per_step": s["step_time_breakdown_s"]["data"] * 1e3, "loader": s["data_loader"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="quick", choices=sorted(MODELS))
    ap.add_argument("--store", default="", help="a store directory (default: the quick-start synthetic source)")
    ap.add_argument("--seq-len", type=int, default=0, help="0: the model's default")
    ap.add_argument("--batch", type=int, default=0, help="0: the model's default")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 leaves a core free on a 2-core host)")
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--skip", type=int, default=20, help="warm-up steps not timed")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not 0 < args.skip < args.steps:
        ap.error(f"--skip {args.skip} must be in (0, --steps {args.steps})")
    res: dict[str, list[dict[str, object]]] = {"0": [], "2": []}
    for r in range(args.rounds):
        for pf in random.Random(r).sample(sorted(res), 2):
            res[pf].append(train(args, pf))
    auto = train(args, '"auto"')["loader"]
    ratio = [float(a["ms_per_step"]) / float(b["ms_per_step"]) for a, b in zip(res["2"], res["0"], strict=True)]
    out = {"cpu": cpu_name(), "model": args.model, "store": args.store or None, "threads": args.threads,
           "rounds": args.rounds, "steps": args.steps,
           **{f"ms_per_step_prefetch_{k}": statistics.median(float(x["ms_per_step"]) for x in v)
              for k, v in res.items()},
           **{f"data_ms_per_step_prefetch_{k}": statistics.median(float(x["data_ms_per_step"]) for x in v)
              for k, v in res.items()},
           "prefetch2_over_prefetch0_paired": statistics.median(ratio),
           "prefetch2_over_prefetch0_range": [min(ratio), max(ratio)],
           "auto_chose": auto["prefetch"], "auto_reason": auto["reasons"]["prefetch"]}  # type: ignore[index]
    if args.json:
        print(json.dumps(out))
        return
    print(f"{out['cpu']}, {args.model}, {args.threads} torch thread(s), {args.rounds} alternated rounds of "
          f"{args.steps} steps")
    for k in res:
        print(f"  prefetch {k}: {out[f'ms_per_step_prefetch_{k}']:.3f} ms a step "
              f"(data {out[f'data_ms_per_step_prefetch_{k}']:.3f} ms)")
    print(f"  prefetch 2 / prefetch 0, paired: {out['prefetch2_over_prefetch0_paired']:.3f} "
          f"({min(ratio):.3f}-{max(ratio):.3f}); below 1, the thread pays")
    print(f"  auto chose {out['auto_chose']}: {out['auto_reason']}")


if __name__ == "__main__":
    main()
