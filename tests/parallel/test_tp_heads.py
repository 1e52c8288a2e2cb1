"""The attention layout head-parallel TP relies on, checked in one process against float64 references.

`Attention.wq`, `wk`, `wv` keep head h in rows [h * head_dim, (h + 1) * head_dim), so a contiguous
row split of each (tensor parallel's column-wise Shard(0)) hands each rank whole heads, and a rank
that holds n_heads/tp heads runs the single-device forward unchanged. Summing the ranks' row-wise
`wo` partial outputs must then give the full attention, which is what the all-reduce (or the
reduce-scatter under sequence parallel) computes in a TP run.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from stride.models.transformer import TimeSeriesTransformer, TokenLM
from stride.models.transformer.layers import Attention, apply_rope, rope_cache
from stride.parallel.tp import tp_plan


def reference_attention(attn: Attention, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Textbook multi-head attention in float64, head by head: head h is rows h*hd..(h+1)*hd of wq, wk, wv."""
    x = x.double()
    b, t, d = x.shape
    hd = attn.head_dim
    mask = torch.ones(t, t, dtype=torch.bool).tril() if attn.causal else torch.ones(t, t, dtype=torch.bool)
    heads = []
    for h in range(attn.n_heads):
        q, k, v = (x @ lin.weight.double()[h * hd : (h + 1) * hd].T for lin in (attn.wq, attn.wk, attn.wv))
        q = apply_rope(q.unsqueeze(1), cos.double(), sin.double()).squeeze(1)
        k = apply_rope(k.unsqueeze(1), cos.double(), sin.double()).squeeze(1)
        scores = (q @ k.transpose(-1, -2) / math.sqrt(hd)).masked_fill(~mask, float("-inf"))
        heads.append(scores.softmax(-1) @ v)
    return torch.cat(heads, dim=-1) @ attn.wo.weight.double().T


@pytest.mark.parametrize("causal", [True, False])
def test_attention_is_per_head_textbook_attention(causal: bool) -> None:
    torch.manual_seed(0)
    attn = Attention(d_model=32, n_heads=4, causal=causal)
    x = torch.randn(3, 10, 32)
    cos, sin = rope_cache(10, attn.head_dim)
    err = (attn(x, cos, sin).double() - reference_attention(attn, x, cos, sin)).abs().max().item()
    assert err < 1e-5, f"largest difference to the per-head float64 reference: {err}"


@pytest.mark.parametrize("tp", [2, 4])
def test_a_contiguous_row_split_runs_whole_heads_unchanged(tp: int) -> None:
    """What each TP rank computes: its rows of wq, wk, wv, its columns of wo; the sum is the full output."""
    torch.manual_seed(1)
    d, heads, t = 32, 4, 12
    full = Attention(d_model=d, n_heads=heads, causal=True)
    x = torch.randn(2, t, d)
    cos, sin = rope_cache(t, full.head_dim)
    partial_sum = torch.zeros(2, t, d, dtype=torch.float64)
    for rank in range(tp):
        local = Attention(d_model=d, n_heads=heads, causal=True)  # n_heads is not read in forward
        part = d // tp
        for name in ("wq", "wk", "wv"):
            setattr(local, name, nn.Linear(d, part, bias=False))
            with torch.no_grad():
                getattr(local, name).weight.copy_(getattr(full, name).weight[rank * part : (rank + 1) * part])
        local.wo = nn.Linear(part, d, bias=False)
        with torch.no_grad():
            local.wo.weight.copy_(full.wo.weight[:, rank * part : (rank + 1) * part])
        partial_sum += local(x, cos, sin).double()
    err = (partial_sum - full(x, cos, sin).double()).abs().max().item()
    assert err < 1e-5, f"sum of {tp} head-parallel partial outputs differs from one device by {err}"


def test_both_transformers_have_what_their_tp_plan_addresses() -> None:
    """The TS transformer and the token model share the blocks; each declares its own entry for the root plan."""
    ts = TimeSeriesTransformer(3, 8, 2, d_model=16, n_layers=1, n_heads=2)
    lm = TokenLM(11, 8, d_model=16, n_layers=1, n_heads=2)
    for m, entry in ((ts, "embed"), (lm, "tok")):
        for sp in (True, False):
            plan = tp_plan(m, sp)
            for name in plan.block:
                m.blocks[0].get_submodule(name)  # raises if the plan names a module the block lacks
            for name in plan.root:
                m.get_submodule(name)
        assert set(tp_plan(m, True).root) == {entry, "norm"} and not tp_plan(m, False).root
    for m in (ts, lm):
        attn = m.blocks[0].attn
        assert all(getattr(attn, w).weight.shape == (16, 16) for w in ("wq", "wk", "wv", "wo"))
        assert {f"blocks.0.attn.{w}.weight" for w in ("wq", "wk", "wv", "wo")} <= set(m.state_dict())
