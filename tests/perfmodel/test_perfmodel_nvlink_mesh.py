"""NVLink meshes without a switch (V100 SXM2 boards): a group's collectives run on the links between its members."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from stride.config.errors import ConfigError
from stride.perfmodel import collectives as c
from stride.perfmodel.costmodel import predict
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.layout import Layout
from stride.perfmodel.model_spec import PRESETS


def _v100(domain: int = 8):
    return dataclasses.replace(load_catalog().get("v100"), scaleup_domain=domain)


def test_dgx1_table_is_the_hybrid_cube_mesh() -> None:
    table = c.MESHES["hybrid-cube-mesh"][8]
    assert all(table[i][j] == table[j][i] for i in range(8) for j in range(8))  # links are both ways
    assert all(sum(row) == 6 for row in table)  # a V100 has 6 NVLink links
    assert all(table[i][i] == 0 for i in range(8))


@pytest.mark.parametrize(("size", "stride", "links"), [
    (2, 1, 1),  # TP-2 pairs (0,1) (2,3) (4,5) (6,7): one link each
    (4, 1, 4),  # the quads 0-3 and 4-7: GPU 0 has 1 + 1 + 2 links to its three peers
    (8, 1, 6),  # the whole board: every link
    (2, 4, 1),  # (0,4) (1,5) have two links but (2,6) (3,7) one: the slowest group sets the pace
    (4, 2, 2),  # 0,2,4,6: GPU 2 reaches 0 and 6 by one link each and 4 not at all
])
def test_group_bandwidth_on_a_dgx1(size: int, stride: int, links: int) -> None:
    hw = _v100(8)
    per_link = hw.scaleup_bw_gbps * 1e9 * hw.scaleup_busbw_fraction / 6
    link = c.group_link(hw, size, stride)
    assert link.name == "scale-up"
    assert link.bw == pytest.approx(links * per_link, rel=1e-12)


@pytest.mark.parametrize("domain", [4, 8])
def test_every_group_gets_at_least_one_link(domain: int) -> None:
    """A group with a member linked to none of the others (3 ranks, stride 3, a pipeline hop from GPU 3 to 4) runs
    through a GPU linked to both or over PCIe: one link's worth, never 0 (`stride plan --hardware v100 --devices 6`
    divided by zero; outside review)."""
    hw = _v100(domain)
    one = hw.scaleup_bw_gbps * 1e9 * hw.scaleup_busbw_fraction / 6
    for size in range(2, 17):
        for stride in (1, 2, 3, 4, 5, 6, 8):
            link = c.group_link(hw, size, stride)
            assert link.bw > 0  # across boards: the scale-out figure
            assert link.name != "scale-up" or link.bw >= one * (1 - 1e-12)


def test_layouts_of_six_v100s_are_priced() -> None:
    spec = PRESETS["gpt3-1.3b"]
    for lay in (Layout(dp=3, tp=2, micro_batch=2, precision="fp16"), Layout(dp=6, micro_batch=2, precision="fp16"),
                Layout(dp=2, pp=3, micro_batch=2, precision="fp16", schedule="1f1b")):
        assert predict(spec, lay, _v100(8), 48).step_time_s > 0


def test_four_gpu_board_pairs_get_two_links_and_a_dgx2_is_switched() -> None:
    full = _v100(8).scaleup_bw_gbps * 1e9 * _v100(8).scaleup_busbw_fraction
    assert c.group_link(_v100(4), 2, 1).bw == pytest.approx(full / 3, rel=1e-12)
    assert c.group_link(_v100(4), 4, 1).bw == pytest.approx(full, rel=1e-12)
    for size in (2, 4, 8, 16):  # 16 V100s of a DGX-2 meet through NVSwitch: every group the full bandwidth
        assert c.group_link(_v100(16), size, 1).bw == pytest.approx(full, rel=1e-12)


def test_switched_parts_are_unchanged() -> None:
    hw = load_catalog().get("a100-80gb")
    assert hw.scaleup_mesh == ""
    full = hw.scaleup_bw_gbps * 1e9 * hw.scaleup_busbw_fraction
    assert c.group_link(hw, 2, 1).bw == pytest.approx(full, rel=1e-12)


def test_tp2_on_a_dgx1_pays_for_its_one_link() -> None:
    """A TP-2 step on a DGX-1 moves its activations over one 25 GB/s link: its TP time is 6x a switch's."""
    spec = PRESETS["gpt3-1.3b"]
    lay = Layout(dp=4, tp=2, micro_batch=4, precision="fp16", framework="megatron")
    mesh = predict(spec, lay, _v100(8), 64)
    switched = predict(spec, lay, dataclasses.replace(_v100(8), scaleup_mesh=""), 64)
    assert mesh.breakdown_s["tp_comm"] == pytest.approx(6 * switched.breakdown_s["tp_comm"], rel=0.02)
    assert mesh.step_time_s > switched.step_time_s


def test_a_hardware_file_names_a_bad_mesh(tmp_path: Path) -> None:
    f = tmp_path / "hw.toml"
    f.write_text('[hardware.x]\nbase = "v100"\nscaleup_mesh = "hybrid-cube"\n')
    with pytest.raises(ConfigError, match=r"scaleup_mesh `hybrid-cube` is not one of 'hybrid-cube-mesh' or"):
        load_catalog(f)
    f.write_text('[hardware.z]\nbase = "v100"\nscaleup_mesh = ""\n')  # a base's mesh taken away (a switched box)
    assert c.group_link(load_catalog(f).get("z"), 2, 1).bw == pytest.approx(
        c.group_link(dataclasses.replace(_v100(8), scaleup_mesh=""), 2, 1).bw)
    f.write_text('[hardware.y]\nbase = "a100-80gb"\nscaleup_mesh = "hybrid-cube-mesh"\nscaleup_domain = 8\n')
    assert c.group_link(load_catalog(f).get("y"), 2, 1).bw < c.group_link(load_catalog().get("a100-80gb"), 2, 1).bw


@pytest.mark.parametrize(("text", "part"), [("A800-SXM4-80GB", "a100-80gb"), ("NVIDIA A800 40GB", "a100-40gb")])
def test_a800_is_an_a100_with_its_nvlink_cut(text: str, part: str) -> None:
    """The A800 (NVIDIA's datasheet: NVLink 400 GB/s) is read as an A100 with 200 GB/s a direction, as the H800."""
    from stride.perfmodel.hw_text import resolve

    hw, notes = resolve(text, load_catalog())
    assert (hw.name, hw.scaleup_bw_gbps) == (part, 200.0)
    assert "A800: NVLink 400 GB/s bidir" in notes
    assert resolve("A100 80GB SXM", load_catalog())[0].scaleup_bw_gbps == 300.0
