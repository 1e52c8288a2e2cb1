"""`stride train CONFIG [--set k=v ...] [--out DIR] [--nproc N [--nnodes M --rdzv-endpoint H:P]]`.

With `--nproc` (or `--nnodes` > 1) the command re-runs itself under torchrun; inside torchrun
(`torchrun -m stride train CONFIG` by hand, too) each rank trains its part of the [parallel] layout.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stride.config.schema import RunConfig


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="TOML run config, e.g. configs/quickstart.toml")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set optim.lr=3e-4 (repeatable)")
    p.add_argument("--out", default=None, help="run directory (default: <metrics.out_dir>/<stamp>-<name>); one that "
                   "holds this run continues it from its checkpoint, or says it is finished (docs/checkpoint.md); one "
                   "holding bench results or a sweep is refused")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the run in --out (its files and checkpoints) instead of continuing or refusing it")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or log lines")
    g = p.add_argument_group("distributed (runs torchrun underneath)")
    g.add_argument("--nproc", type=int, default=None, help="processes per node (one per GPU; on CPU one per core)")
    g.add_argument("--nnodes", type=int, default=1,
                   help="nodes taking part (each runs the same command; default: %(default)s)")
    g.add_argument("--rdzv-endpoint", default=None, help="HOST:PORT of the rendezvous, the same on every node")
    g.add_argument("--node-rank", type=int, default=None, help="this node's rank (optional with c10d rendezvous)")
    g.add_argument("--max-restarts", type=int, default=0,
                   help="times torchrun restarts all workers after a failure (default: %(default)s)")
    p.set_defaults(func=run)


def _train_args(args: argparse.Namespace) -> list[str]:
    out = [args.config]
    for o in args.overrides:
        out += ["--set", o]
    if args.out:
        out += ["--out", args.out]
    if args.no_progress:
        out.append("--no-progress")
    if args.overwrite:
        out.append("--overwrite")
    return out


def run(args: argparse.Namespace) -> int:
    from stride.config import load_config
    from stride.config.errors import ConfigError
    from stride.launch.lifeline import watch_launcher
    from stride.launch.torchrun import (
        inside_launcher,
        launcher_env,
        new_run_folder,
        remove_if_empty,
        restart_problem,
        run_torchrun,
        torchrun_command,
    )

    watch_launcher()  # a rank of `stride train --nproc`: ends with its launcher (a no-op anywhere else)

    cfg = load_config(args.config, args.overrides)
    if args.out:  # a bench's or a sweep's folder is not a run folder (--overwrite included): refused, nothing written
        from stride.files.folder_kind import refuse_others

        refuse_others(args.out, "train")
    # `is not None`, `!= 1`: --nproc 0 or --nnodes 0 used to run one process here; torchrun_command refuses them
    if (args.nproc is not None or args.nnodes != 1) and not inside_launcher():
        from stride.launch.preflight import check_before_launch

        nproc = 1 if args.nproc is None else args.nproc

        def command() -> list[str]:  # the ranks' command line, from `args` as they stand (their --out included)
            return torchrun_command(_train_args(args), nproc=nproc, nnodes=args.nnodes,
                                    rdzv_endpoint=args.rdzv_endpoint, max_restarts=args.max_restarts,
                                    node_rank=args.node_rank)

        cmd = command()  # bad launcher flags fail first
        from stride.train.resources import check_resources

        check_resources(cfg, ranks_here=nproc, warn=False)  # a config that cannot fit: refused once, here
        check_before_launch(cfg, nproc * args.nnodes, ranks_here=True)  # a bad layout fails here, once, before any rank
        if problem := restart_problem(cfg.checkpoint.enabled, args.max_restarts, cfg.checkpoint.resume):
            raise ConfigError(problem)
        made = None  # the folder this launcher made for the ranks, removed again if no attempt wrote in it
        if args.out is None and args.nnodes == 1 and args.max_restarts > 0:  # one folder for every attempt
            args.out = made = new_run_folder(cfg.metrics.out_dir, cfg.train.name)
            cmd = command()
        # --overwrite goes to the ranks: the first attempt's rank 0 replaces the run once its checks of the config
        # (the same on every rank) have passed (`_train`). Replaced here, before them, a config the ranks refused
        # left the old run deleted and the refusal said "nothing was trained or written"
        auto_pin = cfg.parallel.pin_ranks == "auto"  # the only setting whose ranks read the host's idle cores
        if args.out and args.nnodes == 1:  # the ranks of this job hold the run folder as one (stride.files.run_lock)
            from stride.files import run_lock

            try:
                with run_lock.held(Path(args.out)) as lock:
                    return run_torchrun(cmd, {**launcher_env(cfg.train.threads or 1),
                                              **run_lock.env_for_ranks(lock)}, measure_idle=auto_pin)
            finally:
                if made is not None:
                    remove_if_empty(made)
        return run_torchrun(cmd, launcher_env(cfg.train.threads or 1), measure_idle=auto_pin)
    return _train(cfg, args)


def _train(cfg: RunConfig, args: argparse.Namespace) -> int:
    from stride.checkpoint import Preempted
    from stride.report.summary_table import print_summary
    from stride.train.trainer import Trainer

    if args.no_progress:
        cfg.metrics.progress = False
    from stride.launch.torchrun import overwrite_applies

    # a restart of torchrun's ranks continues the run its first attempt replaced (--overwrite), it does not replace it
    overwrite = getattr(args, "overwrite", False) and overwrite_applies()
    trainer = Trainer(config=cfg, out=args.out, overwrite=overwrite)  # the config is checked here, nothing written
    if overwrite and args.out is not None and inside_stride_launcher():
        trainer.overwrite = _replace_run(cfg, args.out)
    try:
        # stride's own warnings (the peak one MFU would divide by) are one line each: cli.main's
        # stride_warnings_as_lines, around every command
        result = trainer.fit()
    except Preempted as stop:
        # Every rank stopped after the same step and the checkpoint is committed. Return instead of
        # letting the SystemExit's traceback carry the trainer (and its gloo groups) into interpreter
        # teardown: there a gloo worker thread that still holds a finished collective's tensors
        # needs the GIL to drop them, is ended by the finalizing interpreter, and std::terminate
        # aborts the process (exit -6 after a committed checkpoint, seen in CI at pp=2). Freed here,
        # the groups' destructors join their threads while the interpreter is alive.
        code = int(stop.code or 0)
    except KeyboardInterrupt:
        # Ctrl-C without checkpoints (with them it is a Preempted save): say where it stopped and what is kept
        # (outside audit 12: "stopped (interrupted)" alone)
        if trainer.par.is_rank0:
            from stride.checkpoint.rerun import earlier_run

            run = trainer.run_dir.path if trainer.run_dir is not None else None
            left = run is not None and earlier_run(run) is not None
            line = interrupted_line(cfg, trainer.step, args.out, getattr(args, "overwrite", False), left)
            print(f"stride train: {line}", file=sys.stderr)
        code = 130
    else:
        code = 0
        if trainer.par.is_rank0:
            from rich.console import Console

            term = Console()
            if result.already_finished:  # nothing trained: say so, then show the run's own summary
                from stride.shown_text import plain

                print(f"stride train: {plain(result.already_finished)}", file=sys.stderr)
            if result.summary:
                print_summary(result.summary, term if term.is_terminal else Console(width=120))
            from stride.shown_text import plain

            # a sink that failed mid-run warned once, maybe thousands of lines up: said again at the end
            for sink, why in ((result.summary or {}).get("sink_failures") or {}).items():
                print(f"stride train: {plain(sink)} stopped logging during the run: {plain(why)} (the run's own "
                      "files are complete; summary.json's sink_failures)", file=sys.stderr)

            # metrics.out_dir and --out are text from a config file: an ESC in one recoloured the terminal (audit 20)
            print(f"run directory: {plain(result.run_dir)}")
    del trainer
    release_process_groups()
    return code


def inside_stride_launcher() -> bool:
    """A rank that `stride train --nproc` started (its launcher's status folder is in the environment)."""
    import os

    from stride.launch.torchrun import STATUS_DIR_ENV, inside_launcher

    return inside_launcher() and bool(os.environ.get(STATUS_DIR_ENV))


def _replace_run(cfg: RunConfig, out: str) -> bool:
    """`--overwrite` under `stride train --nproc`, in the attempt that does it: rank 0 replaces the run in `out` now,
    after this rank's checks of the config, and notes it for the launcher, so that a restart continues the run this
    starts. Returns whether the trainer should still replace it itself (other ranks: as before; no note: yes)."""
    import os

    from stride.checkpoint.rerun import open_run_folder
    from stride.launch.torchrun import note_replaced

    if os.environ.get("RANK", "0") != "0":
        return True  # only rank 0 opens the run folder (Trainer.fit)
    open_run_folder(cfg, out, overwrite=True).close()
    return not note_replaced()


def interrupted_line(cfg: RunConfig, step: int, out: str | None, overwrite: bool, left: bool) -> str:
    """What a Ctrl-C without a resumable checkpoint stopped, and what the same command does next: with `--out` and a
    partial run `left` in it (metrics.jsonl), rerunning is refused (stride.checkpoint.rerun) unless --overwrite
    replaces it; it said "the same command starts over", which then failed with exit status 2."""
    from stride.shown_text import plain

    stopped = f"stopped (interrupted) after step {step} of {cfg.train.steps}"
    c = cfg.checkpoint
    if c.enabled and c.resume == "auto":
        return f"{stopped}; the same command resumes from the newest committed checkpoint, if any"
    why = "no checkpoint (checkpoint.enabled = false)" if not c.enabled else "no resume (checkpoint.resume = never)"
    if out is None:
        then = "the same command starts over in a new run folder"
    elif overwrite or not left:
        then = "the same command starts over"
    else:
        then = (f"{plain(out)} keeps this run's partial metrics, so rerunning needs --overwrite (which replaces them) "
                "or another --out")
    hint = "; --set checkpoint.enabled=true makes a Ctrl-C resumable" if not c.enabled else ""
    return f"{stopped}; {why}: {then}{hint}"


def release_process_groups() -> None:
    """Destroy the process groups and collect what held them now, not at interpreter exit (see `_train`)."""
    import gc

    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    gc.collect()
