"""Runs under torchrun: trains the tiny 4-layer transformer through each pipeline layout in one process group.

Rank 0 writes `<out>/<name>.json` (train and validation loss per step, summary fields) and
`<out>/<name>.pt` (the full parameters, gathered over stages and shards). Also imported by the
tests for the shared config and the single-process reference.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

# 4 layers: 4 stages at pp=2 x 2 stages per rank. grad_clip 0.05 clips every step, so clipping
# across stages is part of what is compared; validation at steps 3 and 6 goes through the stages.
BASE = [
    "model.d_model=32", "model.n_layers=4", "model.n_heads=4",
    "data.n_assets=4", "data.n_steps=600", "data.seq_len=16",
    "train.steps=6", "train.batch_size=8", "train.threads=1", "train.val_every=3", "train.val_batches=2",
    "train.grad_clip=0.05", "optim.warmup_steps=0", "optim.lr=3e-3",
    "metrics.log_every=1", "metrics.progress=false", "metrics.skip_steps=1",
]

RUNS: dict[str, list[str]] = {
    # 2 processes
    "gpipe": ["parallel.pp=2", "parallel.pp_schedule='gpipe'"],
    "1f1b": ["parallel.pp=2", "parallel.pp_schedule='1f1b'"],
    "interleaved_1f1b": ["parallel.pp=2", "parallel.pp_schedule='interleaved_1f1b'"],
    "zero_bubble": ["parallel.pp=2", "parallel.pp_schedule='zero_bubble'"],
    "zbv": ["parallel.pp=2", "parallel.pp_schedule='zbv'"],
    "1f1b_accum": ["parallel.pp=2", "train.grad_accum=2", "parallel.microbatches=2"],
    "1f1b_ac": ["parallel.pp=2", "train.activation_checkpointing='full'"],
    # 4 processes
    "pp_fsdp": ["parallel.pp=2", "parallel.dp_shard=2"],
    "pp_ddp": ["parallel.pp=2", "parallel.dp_replicate=2"],
    "pp_fsdp_interleaved": ["parallel.pp=2", "parallel.dp_shard=2", "parallel.pp_schedule='interleaved_1f1b'"],
    # pp x tp: each stage's blocks tensor-parallel; with sequence parallel the stages send T/tp tokens
    "pp_tp": ["parallel.pp=2", "parallel.tp=2"],
    "pp_tp_nosp": ["parallel.pp=2", "parallel.tp=2", "parallel.sequence_parallel=false"],
    "pp_tp_interleaved": ["parallel.pp=2", "parallel.tp=2", "parallel.pp_schedule='interleaved_1f1b'"],
    "pp_tp_interleaved_nosp": ["parallel.pp=2", "parallel.tp=2", "parallel.pp_schedule='interleaved_1f1b'",
                               "parallel.sequence_parallel=false"],
    # zero-bubble schedules with data parallelism: DDP's gradient mean taken after the schedule,
    # FSDP2 with blocks kept gathered through the step (the weight-gradient pass needs them)
    "pp_ddp_zero_bubble": ["parallel.pp=2", "parallel.dp_replicate=2", "parallel.pp_schedule='zero_bubble'"],
    "pp_fsdp_zbv": ["parallel.pp=2", "parallel.dp_shard=2", "parallel.pp_schedule='zbv'",
                    "parallel.reshard_after_forward=false"],
    # compile per block inside FSDP2 units inside pipeline stages (no validation: its whole-batch
    # forward is one more compile, about a third more time, and other runs check validation)
    "pp_fsdp_compile": ["parallel.pp=2", "parallel.dp_shard=2", "train.compile='model'", "train.val_every=0"],
}
BY_WORLD = {2: ["gpipe", "1f1b", "interleaved_1f1b", "zero_bubble", "zbv", "1f1b_accum", "1f1b_ac",
                "ckpt_crash", "ckpt_resume"],
            4: ["pp_fsdp", "pp_ddp", "pp_fsdp_interleaved", "pp_tp", "pp_tp_nosp", "pp_tp_interleaved",
                "pp_tp_interleaved_nosp", "pp_ddp_zero_bubble", "pp_fsdp_zbv", "pp_fsdp_compile"]}
SUMMARY_KEYS = ("world_size", "parallel", "params_sha256", "params", "samples_per_s", "per_rank_samples_per_s",
                "flops_per_step", "mfu", "step_time_s", "step_time_breakdown_s", "pipeline", "final_val_loss")


CKPT = ["parallel.pp=2", "checkpoint.enabled=true", "checkpoint.every=3"]


class _Crash(RuntimeError):
    pass


def _crash_at(step: int):
    from stride.train.callbacks import Callback

    class CrashAt(Callback):
        """Raises at the end of `step` on every rank (after the step-3 checkpoint, before the next)."""

        def on_step_end(self, trainer) -> None:
            if trainer.step == step:
                raise _Crash(f"crash at step {step}")

    return CrashAt()


def run(overrides: list[str], out: Path | None = None, crash_at: int | None = None) -> tuple[dict, dict]:
    """Train once; returns (result, full parameters) on every rank."""
    from stride.config import load_config
    from stride.train.trainer import Trainer

    cfg = load_config(overrides=BASE + overrides)
    callbacks = [_crash_at(crash_at)] if crash_at else None
    trainer = Trainer(config=cfg, out=out, write_run_dir=out is not None, callbacks=callbacks)
    try:
        res = trainer.fit()
    except _Crash:
        return {"crashed_at": trainer.step}, {}
    pipe = trainer.par.pipeline
    full = pipe.full_state(trainer.model) if pipe is not None else trainer.model.state_dict()
    result = {
        "losses": [r["loss"] for r in res.history if "loss" in r],
        "val_losses": [r["val_loss"] for r in res.history if "val_loss" in r],
        **{k: res.summary.get(k) for k in SUMMARY_KEYS},
    }
    return result, {k: v.detach().clone() for k, v in full.items()}


def run_names(out_dir: Path, names: list[str]) -> None:
    """Each named run in turn, on the process group already initialised; rank 0 writes the files."""
    import torch.distributed as dist

    for name in names:
        if name in ("ckpt_crash", "ckpt_resume"):  # one run dir: crash after step 4, resume from step 3
            result, params = run(CKPT, out_dir / "ckpt_run", crash_at=4 if name == "ckpt_crash" else None)
        else:
            result, params = run(RUNS[name])
        if dist.get_rank() == 0:
            torch.save(params, out_dir / f"{name}.pt")
            (out_dir / f"{name}.json").write_text(json.dumps(result))
        dist.barrier()


def main(out: str, names: list[str]) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    run_names(Path(out), names)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2].split(","))
