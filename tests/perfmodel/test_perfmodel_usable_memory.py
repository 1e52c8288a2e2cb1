"""A plan fits when its device peak is at most what a process can allocate, not the vendor's "80GB".

Audit 4 (#8): the catalog took vendor GB as GiB and held plans to it, so an H100 plan needing 79.7 GiB was marked
as fitting on a part whose runtime reports 79.11 GiB total."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from stride.config.errors import ConfigError
from stride.perfmodel.hardware import USABLE_MEMORY_FRACTION, load_catalog
from stride.perfmodel.hw_text import resolve
from stride.perfmodel.model_spec import parse_model_spec
from stride.perfmodel.planner import search

GIB = 2**30


def test_an_h100_holds_what_cuda_reports_not_the_datasheet_figure() -> None:
    h100 = load_catalog().get("h100-sxm")
    assert h100.memory_gib == 80 and h100.usable_memory_bytes == pytest.approx(79.11 * GIB)
    assert h100.fits(79.0 * GIB, 8)
    assert not h100.fits(79.7 * GIB, 8)  # the audit's plan: under 80, over what the card has


def test_a_part_without_a_measured_figure_gets_the_default_share_and_a_cpu_host_all_of_it() -> None:
    cat = load_catalog()
    gaudi = cat.get("gaudi3")
    assert gaudi.usable_memory_gib is None
    assert gaudi.usable_memory_bytes == pytest.approx(gaudi.memory_gib * USABLE_MEMORY_FRACTION * GIB)
    cpu = cat.get("epyc-9654")
    assert cpu.usable_memory_bytes == cpu.memory_gib * GIB


def test_every_measured_figure_is_a_little_below_its_vendor_figure() -> None:
    """0.98-1.0 of the vendor figure: a transcription slip (GB for GiB, a wrong part) falls outside."""
    measured = [hw for hw in load_catalog().devices.values() if hw.usable_memory_gib is not None]
    assert len(measured) >= 6
    for hw in measured:
        assert 0.98 <= hw.usable_memory_gib / hw.memory_gib <= 1.0, hw.name


def test_an_override_of_the_memory_drops_the_bases_usable_figure(tmp_path: Path) -> None:
    f = tmp_path / "hw.toml"
    f.write_text('[hardware.big-h100]\nbase = "h100-sxm"\nmemory_gib = 96\n'
                 '[hardware.mine]\nbase = "h100-sxm"\nusable_memory_gib = 78.5\n')
    cat = load_catalog(f)
    assert cat.get("big-h100").usable_memory_bytes == pytest.approx(96 * USABLE_MEMORY_FRACTION * GIB)
    assert cat.get("mine").usable_memory_bytes == pytest.approx(78.5 * GIB)


@pytest.mark.parametrize("value", ["81", "0", "-3"])
def test_a_usable_figure_outside_the_memory_is_refused_by_name(tmp_path: Path, value: str) -> None:
    f = tmp_path / "hw.toml"
    f.write_text(f'[hardware.x]\nbase = "h100-sxm"\nusable_memory_gib = {value}\n')
    with pytest.raises(ConfigError, match="usable_memory_gib"):
        load_catalog(f)


def test_a_memory_size_read_from_a_rows_text_gets_the_default_share() -> None:
    hw, notes = resolve("H100 NVL 94GB", load_catalog())
    assert hw.memory_gib == 94 and hw.usable_memory_gib is None
    hw, _ = resolve("A100 40GB", load_catalog())
    assert hw.usable_memory_bytes == pytest.approx(39.39 * GIB)  # the 40GB part's own measured figure


def test_no_ranked_layout_needs_more_than_the_usable_memory() -> None:
    h100 = load_catalog().get("h100-sxm")
    result = search(parse_model_spec("llama3-8b"), h100, devices=8, global_batch=256)
    assert result.ranked
    assert all(p.peak_mem_bytes <= h100.usable_memory_bytes for p in result.ranked)
    assert all(not h100.fits(p.peak_mem_bytes, 8) for p in result.rejected_memory)


def test_the_plan_prints_the_usable_figure_beside_the_datasheet_one() -> None:
    out = subprocess.run([sys.executable, "-m", "stride.cli.main", "plan", "--model", "llama3-8b", "--hardware", "h100",
                          "--devices", "8"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())  # rich wraps long lines
    assert re.search(r"total \d+\.\d of 79\.1 usable \(80 on the datasheet\)", text), text
