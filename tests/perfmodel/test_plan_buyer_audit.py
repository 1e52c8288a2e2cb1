"""`stride plan` as a buyer reads it (planner audit of 2026-12-07): each test failed before its fix.

- a --hardware text with a figure in exponent notation ("1e30 TFLOPS") or a price ("$-3/h") was planned as the
  catalog part without a word; now refused naming the figure;
- the --workload plan's table said "within 0.5 %: less memory first" and ranked by step time alone;
"""

from __future__ import annotations

import json

import pytest

from stride.cli.main import main


@pytest.mark.parametrize("text, figure", [("H100 SXM 1e30 TFLOPS", "1e30"), ("H100 SXM 1e30 TB/s", "1e30"),
                                          ("H100 SXM @ 1e30 W", "1e30")])
def test_an_exponent_figure_in_the_hardware_text_is_refused(text: str, figure: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--model", "llama3-8b", "--devices", "8", "--hardware", text]) == 2
    err = capsys.readouterr().err
    assert figure in err and "exponent" in err and "Traceback" not in err


@pytest.mark.parametrize("text", ["H100 SXM $-3/h", "H100 SXM 2 USD per hour"])
def test_a_price_in_the_hardware_text_is_refused_pointing_at_the_file_field(
        text: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--model", "llama3-8b", "--devices", "8", "--hardware", text]) == 2
    assert "price_per_hour_usd" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["TPU v5e-256", "H100 SXM 96GB @ 500 W"])
def test_names_and_plain_figures_are_still_read(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--model", "gpt3-1.3b", "--devices", "8", "--hardware", text, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["best"] is not None


def test_the_workload_plan_ranks_ties_by_memory_as_its_table_says(capsys: pytest.CaptureFixture[str]) -> None:
    """The --workload table's title says "within 0.5 %: less memory first"; its ranking was by step time alone, so
    DDP at 0.6193 GiB ranked above FSDP2 ZeRO-2 0.0005 % slower at 0.6171 GiB."""
    from stride.perfmodel.planner import TIE

    assert main(["plan", "--workload", "ts_transformer_small", "--hardware", "epyc-9654", "--devices", "2",
                 "--json"]) == 0
    ranked = json.loads(capsys.readouterr().out)["ranked"]
    head = [p for p in ranked if p["step_time_s"] <= ranked[0]["step_time_s"] * (1 + TIE)]
    assert ranked[0]["peak_mem_gib"] == min(p["peak_mem_gib"] for p in head)


@pytest.mark.parametrize("devices, said", [(20000, "no more devices were tried"), (2, "no count from 4 to 16,384")])
def test_nothing_fits_says_which_device_counts_were_tried(devices: int, said: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """20,000 devices where nothing fits printed "no device count up to 16,384 fits it": no count had been tried."""
    model = "layers=1,hidden=2000000,heads=1,vocab=1000,seq=128"
    assert main(["plan", "--model", model, "--devices", str(devices), "--global-batch", str(devices)]) == 1
    out = capsys.readouterr().out
    assert said in " ".join(out.split()) and "up to 16,384 fits" not in out
    assert main(["plan", "--model", model, "--devices", str(devices), "--global-batch", str(devices), "--json"]) == 1
    res = json.loads(capsys.readouterr().out)
    assert res["fits_from_devices"] is None and said in res["fits_from_note"]


def test_a_default_batch_far_past_its_target_is_said(capsys: pytest.CaptureFixture[str]) -> None:
    """llama3-8b on 100,000 H100s: the default batch was one sequence a device, 819M tokens a step, under a help text
    that says "about 4M tokens", and nothing said so. A given --global-batch, or a default near 4M, says nothing."""
    assert main(["plan", "--model", "llama3-8b", "--devices", "100000", "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert any("819,200,000 tokens a step" in n and "--global-batch" in n for n in notes)
    for given in (["--devices", "100000", "--global-batch", "100000"], ["--devices", "64"], ["--devices", "1024"]):
        assert main(["plan", "--model", "llama3-8b", *given, "--json"]) == 0
        assert not any("default global batch" in n for n in json.loads(capsys.readouterr().out)["notes"])
    assert main(["plan", "--model", "llama3-8b", "--compare-hardware", "h100-sxm:100000,h200:64", "--json"]) == 0
    rows = {r["devices"]: r for r in json.loads(capsys.readouterr().out)["hardware"]}
    assert "819,200,000 tokens" in rows[100000]["note"] and "note" not in rows[64]


def test_a_fleet_where_nothing_fits_says_how_close_and_from_how_many(capsys: pytest.CaptureFixture[str]) -> None:
    """--compare-hardware said "no layout fits in memory" and nothing else, where the plan of the same fleet names the
    closest layout's memory, the count it fits from, and the framework that limited the search."""
    assert main(["plan", "--model", "llama3-70b", "--compare-hardware", "tpu-v5e:8,h200:64", "--json"]) == 0
    rows = {r["hardware"]: r for r in json.loads(capsys.readouterr().out)["hardware"]}
    why = rows["tpu-v5e"]["reason"]
    assert "closest needs" in why and "fits from 128 devices" in why and "framework maxtext" in why
    assert "reason" not in rows["h200"]


def test_fp4_on_a_part_without_fp4_asks_for_another_precision(capsys: pytest.CaptureFixture[str]) -> None:
    """--precision fp4 on an H100 told the user to pick --fp8-recipe tensorwise, rowwise or delayed: an fp4 plan
    reads no --fp8-recipe (it runs nvfp4), and the H100 has no fp4 at all."""
    assert main(["plan", "--model", "llama3-8b", "--devices", "8", "--precision", "fp4"]) == 2
    err = capsys.readouterr().err
    assert "no fp4 peak" in err and "--precision bf16" in err and "--fp8-recipe" not in err


def test_a_batch_below_the_fewest_replicas_names_that_count(capsys: pytest.CaptureFixture[str]) -> None:
    """A model that splits at most 4 ways (2 heads, 2 layers) on 65,536 devices with a batch of 1 was told to pick "a
    batch divisible by the data-parallel sizes (e.g. 65536)": never that 16,384 replicas is the fewest it can have."""
    model = "layers=2,hidden=128,heads=2,vocab=1000,seq=128"
    assert main(["plan", "--model", model, "--devices", "65536", "--global-batch", "1"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "global batch 1" in err and "the fewest: 16,384" in err and "Traceback" not in err


def test_the_compare_table_names_the_peak_its_mfu_is_over(capsys: pytest.CaptureFixture[str]) -> None:
    """The plan's table heads an fp8 / fp4 plan's MFU "MFU (fp4 peak)"; the --compare-hardware table said "MFU"."""
    assert main(["plan", "--model", "llama3-8b", "--compare-hardware", "b200:8", "--precision", "fp4"]) == 0
    assert "MFU (fp4 peak)" in capsys.readouterr().out


def test_fits_from_says_the_batch_it_was_planned_at(capsys: pytest.CaptureFixture[str]) -> None:
    """seq 1M on 8 H100s: "fits from 32 devices: ... 2419 s a step" was a step of 32 sequences (that count's default)
    under a header of 8, and did not say so."""
    assert main(["plan", "--model", "llama3-8b", "--devices", "8", "--seq", "1000000"]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "fits from 32 devices" in out and "at global batch 32 (that count's default; this plan's is 8)" in out
    assert main(["plan", "--model", "llama3-8b", "--devices", "8", "--seq", "1000000", "--json"]) == 1
    res = json.loads(capsys.readouterr().out)
    assert (res["fits_from_devices"], res["fits_from_global_batch"], res["global_batch"]) == (32, 32, 8)


def test_a_bare_compare_of_every_part_does_not_search_counts_for_each_that_fails(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The count a failing fleet fits from is up to a dozen more searches: over every part of the catalog (a 1T model,
    54 parts) it took the compare from 7 s to 84 s, so a bare --compare-hardware leaves it to a plan of the part."""
    assert main(["plan", "--model", "llama3-70b", "--compare-hardware", "--devices", "8", "--json"]) == 0
    failed = [r["reason"] for r in json.loads(capsys.readouterr().out)["hardware"] if "reason" in r]
    assert any("closest needs" in r for r in failed) and not any("fits from" in r for r in failed)


def test_a_small_budget_prints_its_hours_and_cost_not_zero(capsys: pytest.CaptureFixture[str]) -> None:
    """--tokens 1e6 on 8 H100s printed "0.0" hours, "0.0 - 0.0" and "0" dollars."""
    assert main(["plan", "--model", "llama3-8b", "--compare-hardware", "h100-sxm:8", "--tokens", "1e6"]) == 0
    out = capsys.readouterr().out
    assert "0.00396" in out and "0.0 - 0.0" not in out and "0.095" in out


def test_a_budget_below_one_step_is_said(capsys: pytest.CaptureFixture[str]) -> None:
    """--tokens 1e6 where a step is 4.2M tokens priced a quarter of a step without a word."""
    assert main(["plan", "--model", "llama3-8b", "--compare-hardware", "h100-sxm:8", "--tokens", "1e6", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["hardware"]
    assert "less than one step (4,194,304 tokens)" in row["note"]
    assert main(["plan", "--model", "llama3-8b", "--compare-hardware", "h100-sxm:8", "--json"]) == 0
    assert "note" not in json.loads(capsys.readouterr().out)["hardware"][0]


def test_a_fleet_that_fits_from_more_devices_says_the_batch_there(capsys: pytest.CaptureFixture[str]) -> None:
    """As the plan's "fits from N devices": a fleet's count comes with the batch it was planned at where that is the
    count's default, not the fleet's."""
    assert main(["plan", "--model", "llama3-8b", "--seq", "1000000", "--compare-hardware", "h100-sxm:8",
                 "--json"]) == 1
    (row,) = json.loads(capsys.readouterr().out)["hardware"]
    assert "fits from 32 devices (at global batch 32, that count's default)" in row["reason"]
