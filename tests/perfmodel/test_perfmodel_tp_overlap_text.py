"""TP communication overlap as launch configs write it: said off ("TP_COMM_OVERLAP=False", MLPerf v5.1's NVFP4
configs) is off, and the exposed TP collectives are charged in full."""

from __future__ import annotations

import dataclasses

import pytest
from test_perfmodel_row_variants import BASE  # the same base row; pytest puts this folder on sys.path

from stride.perfmodel import row_text as rt
from stride.perfmodel.costmodel import predict
from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.layout import Layout
from stride.perfmodel.model_spec import PRESETS
from stride.perfmodel.published import row_inputs

CAT = load_catalog()


@pytest.mark.parametrize("text, default, want", [
    ("NVIDIA NeMo Framework Release 25.09; TP_COMM_OVERLAP=False FULL_CUDA_GRAPH=1", False, False),
    ("NVIDIA NeMo Framework Release 25.04; TP_COMM_OVERLAP=True FULL_CUDA_GRAPH=True", False, True),
    ("tp_comm_overlap: false", True, False),  # said off beats a framework that overlaps by default
    ("torchtitan, async TP", False, True),
    ("no async tp", True, False),
    ("Megatron-Core", False, False),
    ("MaxText", True, True),
])
def test_tp_overlap_as_configs_write_it(text: str, default: bool, want: bool) -> None:
    assert rt.tp_overlap(text.lower(), default) is want


def test_a_row_saying_overlap_off_pays_its_tp_collectives() -> None:
    on = row_inputs({**BASE, "tp": "4", "sp": "True", "framework": "NeMo; TP_COMM_OVERLAP=True"}, CAT)
    off = row_inputs({**BASE, "tp": "4", "sp": "True", "framework": "NeMo; TP_COMM_OVERLAP=False"}, CAT)
    assert on.layout.tp_overlap and not off.layout.tp_overlap


def test_exposed_tp_collectives_by_hand() -> None:
    """Overlapped, the TP time costs (1 - overlap) of itself while it fits under the GEMMs; off, all of it."""
    hw, spec, eff = CAT.get("gb200"), PRESETS["llama3-405b"].with_seq(8192), Efficiency()
    lay = Layout(dp=1, tp=4, sp=True, micro_batch=1, framework="megatron", precision="bf16")
    t_off = predict(spec, lay, hw, 1, eff).breakdown_s["tp_comm"]
    t_on = predict(spec, dataclasses.replace(lay, tp_overlap=True), hw, 1, eff).breakdown_s["tp_comm"]
    assert t_on == pytest.approx((1 - eff.overlap) * t_off, rel=1e-9)
