"""torchtitan's sequence parallelism before its dim-0 sharding (PR #4121, 2026-08-20): every TP all-gather /
reduce-scatter also copies the gathered [batch, seq, hidden] activation (torch.cat / chunk over dim 1). Read from a
row's words and costed as that copy: by hand, and against the published torchtitan rows it was made for."""

from __future__ import annotations

import dataclasses

import pytest
from test_perfmodel_row_variants import BASE  # the same base row; pytest puts this folder on sys.path

from stride.perfmodel import row_text as rt
from stride.perfmodel.costmodel import predict
from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.kernels import Costs
from stride.perfmodel.layout import Layout
from stride.perfmodel.model_spec import PRESETS
from stride.perfmodel.published import row_inputs

CAT = load_catalog()


@pytest.mark.parametrize("text, want", [
    ("torchtitan (commit 1690e0ae, 2026-05-13), FSDP2 + TP", True),
    ("torchtitan main, Sept 2026", False),  # after 73aed7f6c: batch folded into tokens, dim-0 sharding
    ("torchtitan, torch 2.6", True),  # no month: every published torchtitan TP run predates the change
    ("Megatron-Core 0.12, TP 8, 2025-03", False),
])
def test_read_from_the_words(text: str, want: bool) -> None:
    assert rt.torchtitan_tp_copies(text) is want


def test_a_row_reads_it_only_for_torchtitan_with_tp_and_sp() -> None:
    row = {**BASE, "tp": "4", "sp": "True", "dp": "2", "num_gpus": "8", "framework": "torchtitan, FSDP2, 2025-10"}
    assert row_inputs(row, CAT).layout.tp_copies
    assert not row_inputs({**row, "framework": "Megatron-Core, 2025-10"}, CAT).layout.tp_copies
    assert not row_inputs({**row, "tp": "1", "dp": "8"}, CAT).layout.tp_copies


def test_the_copy_by_hand() -> None:
    """Four copies a pass (two all-gathers, two reduce-scatters), each reading and writing the gathered activation
    (tokens x hidden x 2 bytes): forward and backward without recompute, on the compute stream."""
    hw, spec, eff = CAT.get("h100-sxm"), PRESETS["llama3-8b"], Efficiency()
    lay = Layout(dp=1, tp=4, sp=True, micro_batch=1, framework="fsdp2", precision="bf16")
    off = predict(spec, lay, hw, 1, eff).breakdown_s["tp_comm"]
    on = predict(spec, dataclasses.replace(lay, tp_copies=True), hw, 1, eff).breakdown_s["tp_comm"]
    c = Costs(hw, eff, lay, spec)
    msg = spec.seq * spec.hidden * 2 * c.act
    assert on - off == pytest.approx(spec.layers * 2 * 4 * c.memory(2 * msg), rel=1e-9)
    # the copies cost about a third of the collectives' own time at tp4 on NVLink (PR #437's 6 % of an FFN)
    assert 0.2 < (on - off) / off < 0.8
