"""Comm profiles and planner input files: wrong values are one line naming the file and key (audit 14, L3, L4).

`read_comm_profile` checked `alpha < 0 or beta <= 0`, which NaN passes, so `alpha_us = nan` was planned with; a
`meta.world_size` of "eight" was a ValueError, `meta = 5` and `collectives = [1, 2]` AttributeErrors. `stride plan
--comm-profile FILE` without `probe` was ignored (a note): it is now an error saying it is only for `probe`. TOML or
JSON nested thousands deep (a --hardware-file, an --efficiency file) was a RecursionError traceback
(tests/config/test_config_nesting.py: a config and a --set value).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stride.cli.main import main
from stride.config.errors import ConfigError
from stride.perfmodel.efficiency import read_json
from stride.perfmodel.hardware import load_catalog, read_comm_profile

META = '[meta]\nformat = "stride-hwprofile-1"\nworld_size = 8\n'
FIT = "[collectives.all_reduce]\nalpha_us = 10.0\nbeta_us_per_byte = 0.001\n"


@pytest.mark.parametrize(("text", "why"), [
    (META + "[collectives.all_reduce]\nalpha_us = nan\nbeta_us_per_byte = 0.001\n",
     "collectives.all_reduce.alpha_us = nan is not a finite number"),
    (META + "[collectives.all_reduce]\nalpha_us = 1.0\nbeta_us_per_byte = inf\n",
     "collectives.all_reduce.beta_us_per_byte = inf is not a finite number"),
    (META + '[collectives.all_reduce]\nalpha_us = "1"\nbeta_us_per_byte = 0.001\n',
     "collectives.all_reduce.alpha_us = '1' is not a finite number"),
    (META + "[collectives.all_reduce]\nalpha_us = true\nbeta_us_per_byte = 0.001\n",
     "collectives.all_reduce.alpha_us = True is not a finite number"),
    ('[meta]\nformat = "stride-hwprofile-1"\nworld_size = "eight"\n' + FIT,
     "meta.world_size = 'eight' is not a process count (an integer >= 1)"),
    ('[meta]\nformat = "stride-hwprofile-1"\nworld_size = 0\n' + FIT, "meta.world_size = 0 is not a process count"),
    ("meta = 5\n", "meta = 5 is not a table"),
    ("collectives = [1, 2]\n" + META, "collectives = [1, 2] is not a table of [collectives.<name>] fits"),
    (META + "[collectives]\nall_reduce = 3\n", "collectives.all_reduce = 3 is not a table"),
    (META + "[collectives.all_reduce]\nalpha_us = 1.0\nbeta_us_per_byte = 0.001\nfit_r2 = \"good\"\n",
     "collectives.all_reduce.fit_r2 = 'good' is not a number"),
])
def test_a_comm_profile_value_of_the_wrong_kind_is_named(tmp_path: Path, text: str, why: str) -> None:
    prof = tmp_path / "p.toml"
    prof.write_text(text)
    with pytest.raises(ConfigError) as err:
        read_comm_profile(prof, "hw.toml: hardware `evil`")
    assert str(err.value).startswith(f"hw.toml: hardware `evil`: {prof}: {why}"), str(err.value)


def test_a_good_profile_still_reads(tmp_path: Path) -> None:
    prof = tmp_path / "p.toml"
    prof.write_text(META + FIT)
    assert read_comm_profile(prof, "x") == {"all_reduce": (pytest.approx(10.0e-6), pytest.approx(0.001e-6), 8)}


def test_a_profile_through_a_hardware_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "p.toml").write_text(META + "[collectives.all_reduce]\nalpha_us = nan\nbeta_us_per_byte = nan\n")
    (tmp_path / "hw.toml").write_text('[hardware.evil]\nbase = "h100-sxm"\ncomm_profile = "p.toml"\n')
    assert main(["plan", "--model", "llama3-8b", "--hardware", "evil", "--hardware-file", str(tmp_path / "hw.toml"),
                 "--devices", "8"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "collectives.all_reduce.alpha_us = nan is not a finite number" in err, err


def test_comm_profile_outside_probe_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "p.toml").write_text("not a profile")
    assert main(["plan", "--model", "llama3-8b", "--devices", "8", "--comm-profile", str(tmp_path / "p.toml")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"stride plan: config error: --comm-profile {tmp_path / 'p.toml'} is only for `stride plan "
                          "probe`"), err


def _deep_toml(path: Path, head: str = "") -> Path:
    path.write_text(head + "x = " + "[" * 5000 + "]" * 5000 + "\n")
    return path


def test_deeply_nested_inputs_are_one_line_each(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"hardware file .*hw.toml is not valid TOML: nested too deeply to read"):
        load_catalog(_deep_toml(tmp_path / "hw.toml", "[hardware.x]\n"))
    (tmp_path / "eff.json").write_text("[" * 100000)
    with pytest.raises(ConfigError, match=r"eff.json: not valid JSON: nested too deeply to read"):
        read_json(tmp_path / "eff.json")
