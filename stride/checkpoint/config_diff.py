"""Which settings differ between the run that wrote a checkpoint and the run loading it, and which may.

Four kinds of keys:
- not compared: where logs and checkpoints go, and how often (`[metrics]`, `[checkpoint]`, `train.name`,
  `train.threads`);
- allowed to differ, and reported: how the same computation is laid out and executed. DCP reshards model
  and optimizer state into any parallel layout, and the data position counts global batches, so a run
  saved at dp_shard=2 or pp=2 continues at one process on the same data with the same update (up to the
  rounding of another reduction order: bit-identical resume holds only for an unchanged layout);
- `train.steps`: a finished run may be extended to more steps; whether a change continues the run exactly
  is decided by stride.checkpoint.rerun, which knows where the run stopped;
- everything else changes what is trained (model, data, optimizer, batch, schedule, seed,
  precision, lossy gradient compression) and is refused with a diff unless `checkpoint.force_resume`.

A key this module does not know (one added later) is compared strictly: a new layout key must be added
to ALLOWED to be let through.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

NOT_COMPARED_SECTIONS = ("metrics", "checkpoint")
NOT_COMPARED_KEYS = ("train.name", "train.threads", "train.steps")  # train.steps: stride.checkpoint.rerun.decide

# Allowed changes that leave every number as it was: evaluation, loading, timeouts, timing (`stride repro` does
# not count them as a layout history it cannot replay).
SAME_NUMBERS = frozenset({
    "train.val_every", "train.val_batches", "data.prefetch", "data.pin_memory", "data.resident_mb",
    "data.gather_threads", "data.device_resident", "parallel.backend", "parallel.collective_timeout_s",
    "parallel.comm_timing",
})

# Layout and execution: the same global batch, the same loss and update, computed elsewhere or otherwise.
ALLOWED = SAME_NUMBERS | frozenset({
    # [parallel]: degrees and how ranks communicate. Not here: mp_param_dtype (FSDP computes in bf16/fp16,
    # like train.precision), comm_hook and powersgd_rank (lossy gradient compression).
    "parallel.dp_replicate", "parallel.dp_shard", "parallel.tp", "parallel.pp", "parallel.pp_schedule",
    "parallel.microbatches", "parallel.pp_stages_per_rank", "parallel.backend", "parallel.sequence_parallel",
    "parallel.reshard_after_forward", "parallel.ddp_bucket_mb", "parallel.gradient_as_bucket_view",
    "parallel.static_graph", "parallel.comm_timing", "parallel.collective_timeout_s",
    # the global batch in more or fewer micro-batches (memory at another layout), recomputation, kernels
    "train.grad_accum", "train.activation_checkpointing", "train.ac_every", "train.kernels", "optim.impl",
    "train.device", "train.deterministic",
    # (and SAME_NUMBERS: evaluation and loading, not training; the backend, timeouts and timing)
    # Not here: train.compile. "model+optimizer" keeps the learning rate as a tensor in the optimizer state,
    # and a checkpoint written in another mode does not load into it cleanly (a float lr recompiles the
    # optimizer step at every step).
})


@dataclass
class ConfigDiff:
    refused: list[str] = field(default_factory=list)  # `key: saved (checkpoint) -> current (now)` lines
    allowed: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.refused or self.allowed)


def config_diff(saved: dict[str, Any], current: dict[str, Any]) -> ConfigDiff:
    """Every setting that differs, split into refused (changes what is trained) and allowed (layout, execution)."""
    diff = ConfigDiff()
    for sec in sorted(set(saved) | set(current)):
        if sec in NOT_COMPARED_SECTIONS:
            continue
        a, b = saved.get(sec, {}), current.get(sec, {})
        for key in sorted(set(a) | set(b)):
            dotted = f"{sec}.{key}"
            if dotted in NOT_COMPARED_KEYS:
                continue
            va, vb = a.get(key, "<absent>"), b.get(key, "<absent>")
            if va != vb:
                (diff.allowed if dotted in ALLOWED else diff.refused).append(
                    f"{dotted}: {va!r} (checkpoint) -> {vb!r} (now)")
    return diff
