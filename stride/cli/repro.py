"""`stride repro RUN_DIR [--out DIR] [--tolerance R] [--nproc N] [--set K=V] [--allow-edited-config] [--json]`:
re-run a recorded run and compare.

The run folder's files are checked before anything is re-run, by `stride.launch.repro.reproduce`
(`check_run_files`). The config's `model.name` (and any other `module:factory` value) imports that module, as
`stride train` would: repro only folders you trust (docs/launch.md).
"""

from __future__ import annotations

import argparse
import json


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a finished run directory (config.toml, env.json, summary.json)")
    p.add_argument("--out", default=None, help="directory for the re-run (default: <RUN_DIR>-repro)")
    p.add_argument("--tolerance", type=float, default=1e-5,
                   help="relative final-loss tolerance for non-deterministic runs (default 1e-5)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="change a recorded value for the re-run, e.g. --set train.threads=1")
    p.add_argument("--nproc", type=int, default=None,
                   help="processes for the re-run (default: the recorded world_size; more than 1 runs "
                        "`stride train --nproc N`)")
    p.add_argument("--allow-edited-config", action="store_true",
                   help="re-run config.toml even though it was edited after the run (it no longer hashes to the "
                        "recorded config_hash; refused without this, exit 2): the result is not a reproduction")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from stride.launch.repro import reproduce
    from stride.shown_text import plain

    if not args.tolerance >= 0:  # NaN compares False with everything: it made every final loss "within" it
        raise SystemExit(f"stride repro: --tolerance = {args.tolerance} must be >= 0")
    rep = reproduce(args.run_dir, args.out, args.tolerance, args.overrides, args.nproc,
                    allow_edited_config=args.allow_edited_config)
    if args.json:
        print(json.dumps(rep.to_dict()))
        return 0 if rep.matches else 1
    print(f"original: {rep.original}\nre-run:   {rep.rerun}")
    print(f"mode: {'deterministic (bitwise expected)' if rep.deterministic else 'non-deterministic (tolerance)'}")
    print(f"final loss: {rep.loss_original!r} -> {rep.loss_rerun!r} (rel. diff {rep.loss_rel_diff:.2e})")
    if not rep.config_hash_match:
        print("warning: config.toml was edited after the run (it no longer hashes to the recorded config_hash) "
              "and was re-run as it is now (--allow-edited-config): this is not a reproduction of the recorded run")
    was = "not recorded" if rep.world_size_original is None else f"{rep.world_size_original} ({rep.parallel_original})"
    print(f"world size: {was} -> {rep.world_size_rerun} ({rep.parallel_rerun}) in the re-run")
    if rep.layout_note:  # a layout change mid-run: the environment line alone would make the runs look alike
        print(f"layout history: {plain(rep.layout_note)}")
    if rep.env_diff:
        print("environment differs:")
        for key, (a, b) in rep.env_diff.items():
            print(f"  {plain(key)}: {plain(a)} -> {plain(b)}")
    elif rep.layout_differs:
        print("environment: same code version, packages and hardware, but not the same layout (above)")
    else:
        print("environment: same code version, packages and hardware")
    print(rep.verdict)
    return 0 if rep.matches else 1
