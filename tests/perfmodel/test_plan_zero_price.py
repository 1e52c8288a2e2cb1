"""A part priced at 0 USD an hour (outside review of the planner): `--compare-hardware --sort cost` ranked it first,
cost 0, with no word, as if it were free; the plan's $/step column read 0 alike. Both now say that a price of 0 means
the cost is not counted, in the table and in the JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stride.cli.main import main

FREE = '[hardware.my-h100]\nbase = "h100-sxm"\ndisplay_name = "my own H100s"\nprice_per_hour_usd = 0\n'
FLEET = ["plan", "--model", "llama3-8b", "--compare-hardware", "my-h100:8,h100-sxm:8", "--sort", "cost"]


@pytest.fixture
def free(tmp_path: Path) -> str:
    p = tmp_path / "hw.toml"
    p.write_text(FREE)
    return str(p)


def test_a_zero_price_ranked_first_by_cost_says_so_in_json(free: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*FLEET, "--hardware-file", free, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["hardware"]
    assert [r["hardware"] for r in rows] == ["my-h100", "h100-sxm"]  # the ranking itself is unchanged
    assert rows[0]["cost_to_budget_usd"] == 0.0 and rows[1]["cost_to_budget_usd"] > 90_000
    assert "price_per_hour_usd = 0" in rows[0]["note"] and "not counted" in rows[0]["note"]
    assert "ranks first" in rows[0]["note"]
    assert "note" not in rows[1]  # a priced part gets no such line


def test_a_zero_price_ranked_first_by_cost_says_so_in_the_table(free: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*FLEET, "--hardware-file", free]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps the note
    assert "note: my-h100 x 8: my-h100 is priced at 0 USD a device-hour" in out
    assert "not counted, so by cost it ranks first" in out


def test_a_plan_on_a_zero_price_part_says_its_cost_is_not_counted(free: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "--model", "llama3-8b", "--hardware", "my-h100", "--devices", "8", "--hardware-file", free]
    assert main([*args, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["best"]["cost_per_step_usd"] == 0.0
    assert any("price_per_hour_usd = 0" in n and "not counted" in n for n in plan["notes"])
    assert main(args) == 0
    assert "note: my-h100 is priced at 0 USD a device-hour" in " ".join(capsys.readouterr().out.split())
    # the catalog's priced part: no such note
    assert main(["plan", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8", "--json"]) == 0
    assert not any("priced at 0" in n for n in json.loads(capsys.readouterr().out)["notes"])
