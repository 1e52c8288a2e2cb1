"""The transformers' tensor-parallel plan (torch.distributed.tensor.parallel), over the names in layers.py.

Per block, Megatron's layout, so activations inside a sub-layer never leave their rank:

- Attention by heads: `attn.wq`, `attn.wk`, `attn.wv` column-wise (a contiguous Shard(0) of each
  gives every rank n_heads/tp whole heads), `attn.wo` row-wise. Each rank runs RoPE and SDPA on
  its own heads; `Attention` reads the head count from the local shape.
- MLP (SwiGLU): `w1`, `w3` column-wise, `w2` row-wise.
- Without sequence parallel: one all-reduce per sub-layer forward (after `wo`, after `w2`) and one
  in backward (the input gradient of the column-wise projections).
- Sequence parallel (`parallel.sequence_parallel`, default on): the residual stream and the
  RMSNorms are sharded along time (dim 1). Entering each sub-layer all-gathers the tokens
  (Shard(1) -> Replicate) and leaving it reduce-scatters (Partial -> Shard(1)): the same bytes as
  the all-reduce, split in two, and the norms run on T/tp tokens. The gathered input stays a
  DTensor (`use_local_output=False`), so in backward the column-wise input gradients (Partial)
  go straight to Shard(1) by one reduce-scatter instead of an all-reduce and a slice.

The entry (embedding), the final norm and the head are replicated: a small part of the work here.
With sequence parallel the entry's output is cut to each rank's tokens and the final norm sees the
whole sequence again (the forecasting head pools the last token; the token model's head scores
every position).
"""

from __future__ import annotations

import math

from torch import nn

from stride.config.errors import ConfigError, first_few
from stride.models.plan import ParallelPlan, TensorParallelPlan

ATTN_IN = ("wq", "wk", "wv")  # split by heads (column-wise); `wo` row-wise


def block_plan(sequence_parallel: bool) -> dict:
    """Plan for one TransformerBlock, keyed by sub-module names."""
    # DTensor's imports take 1.4 s (sympy, its op table) on a 2-core host: paid here, by a process that applies
    # or checks tensor parallelism, not by every one that imports the model (a `--nproc` launcher at tp = 1)
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel

    # Each sub-layer's input enters as one DTensor that its column-wise projections share (three in
    # attention, two in the MLP): their input gradients add up as one Partial and are reduced once
    # (all-reduce, or reduce-scatter under SP) instead of once per projection.
    entering = Shard(1) if sequence_parallel else Replicate()  # SP: the all-gather of the tokens
    plan = {
        # attention takes (x, cos, sin); the RoPE tables stay plain tensors
        "attn": PrepareModuleInput(input_layouts=(entering, None, None),
                                   desired_input_layouts=(Replicate(), None, None), use_local_output=False),
        **{f"attn.{w}": ColwiseParallel() for w in ATTN_IN},
        "attn.wo": RowwiseParallel(output_layouts=entering),
        "mlp": PrepareModuleInput(input_layouts=(entering,), desired_input_layouts=(Replicate(),),
                                  use_local_output=False),
        "mlp.w1": ColwiseParallel(),
        "mlp.w3": ColwiseParallel(),
        "mlp.w2": RowwiseParallel(output_layouts=entering),
    }
    if sequence_parallel:
        plan.update({"attn_norm": SequenceParallel(), "mlp_norm": SequenceParallel()})
    return plan


def root_plan(entry: str, sequence_parallel: bool) -> dict:
    """The model's own modules: with SP, cut the entry's output to each rank's tokens (no communication)
    and give the final norm (and the head after it) the whole sequence again."""
    if not sequence_parallel:
        return {}
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import PrepareModuleInput, PrepareModuleOutput

    return {
        entry: PrepareModuleOutput(output_layouts=Replicate(), desired_output_layouts=Shard(1)),
        "norm": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),),
                                   use_local_output=True),
    }


def check_tp(model: nn.Module, tp: int) -> None:
    """Heads, projection rows and hidden sizes of every block divisible by `tp` (before any process group)."""
    for i, block in enumerate(model.blocks):
        attn, mlp = block.attn, block.mlp
        if attn.n_heads % tp:
            raise ConfigError(f"`model.n_heads` = {attn.n_heads} is not divisible by `parallel.tp` = {tp}: set "
                              f"`parallel.tp` to one that divides it ({_divisors(attn.n_heads)}), or `model.n_heads` "
                              f"to a multiple of {tp} (with `model.d_model` / `model.n_heads` even)")
        # a contiguous split of each projection's rows is whole heads only if each has n_heads x head_dim rows
        rows = {w: getattr(attn, w).out_features for w in ATTN_IN}
        if set(rows.values()) != {attn.n_heads * attn.head_dim}:
            raise ConfigError(
                f"`parallel.tp` = {tp}: block {i}'s attention projections have {rows} output rows, "
                f"not n_heads ({attn.n_heads}) x head_dim ({attn.head_dim}) each, so a split by rows is not a "
                "split by heads"
            )
        if mlp.w1.out_features % tp:
            raise ConfigError(
                f"the MLP hidden size {mlp.w1.out_features} (block {i}) is not divisible by `parallel.tp` = {tp}: "
                f"it is `model.ffn_mult` x `model.d_model` rounded to a multiple of 8; set `model.ffn_mult` = "
                f"{_ffn_mult_for(mlp.w1.out_features, mlp.w1.in_features, tp)} (hidden size a multiple of {tp}), or "
                f"`parallel.tp` to one that divides it ({_divisors(mlp.w1.out_features)})"
            )
        if mlp.w1.in_features % tp:
            raise ConfigError(f"`model.d_model` = {mlp.w1.in_features} is not divisible by `parallel.tp` = {tp}: set "
                              f"`parallel.tp` to one that divides it ({_divisors(mlp.w1.in_features)})")


def _divisors(n: int) -> str:
    """The tp degrees > 1 that divide `n`, for the fix a refusal names (at most 6 shown)."""
    d = [k for k in range(2, n + 1) if n % k == 0]
    return first_few(d, 6) if d else "none above 1"


def _ffn_mult_for(hidden: int, d_model: int, tp: int) -> str:
    """An `ffn_mult` whose hidden size (rounded to a multiple of 8, as the models do) is the multiple of
    lcm(8, tp) nearest `hidden`: the fix a refusal names."""
    step = math.lcm(8, tp)
    target = max(step, round(hidden / step) * step)
    return f"{target / d_model:.6g}"


def transformer_plan(entry: str) -> ParallelPlan:
    """The plan of a transformer of layers.py's blocks whose input module is `entry` and final norm `norm`."""

    def tensor_parallel(sequence_parallel: bool) -> TensorParallelPlan:
        return TensorParallelPlan(block_plan(sequence_parallel), root_plan(entry, sequence_parallel))

    return ParallelPlan(blocks="blocks", tensor_parallel=tensor_parallel, check_tp=check_tp)
