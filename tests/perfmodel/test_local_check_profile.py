"""The local check measures the comm profile again when `stride comm` left a collective out (its fit was noise on
a loaded host): a profile without the all-reduce priced every DDP run's gradient sync from an assumed link, and
the check's 2-rank MLP came out 32 % too fast."""

from __future__ import annotations

from pathlib import Path

from stride.perfmodel import local_check

FULL = "\n".join(f"[collectives.{c}]\nalpha_us = 1000.0\nbeta_us_per_byte = 0.001\n"
                 for c in ("all_reduce", "all_gather", "reduce_scatter"))
NO_AR = FULL.split("[collectives.all_gather]")[1]


def test_measure_machine_measures_a_profile_again_until_it_has_every_collective(monkeypatch, tmp_path: Path) -> None:
    made: list[str] = []

    def comm_profile(out: Path) -> Path:
        text = NO_AR if not made else FULL
        made.append(text)
        out.write_text("[meta]\nformat = \"stride-hwprofile-1\"\n" + ("[collectives.all_gather]" + text
                                                                       if text is NO_AR else text))
        return out

    monkeypatch.setattr(local_check, "comm_profile", comm_profile)
    monkeypatch.setattr(local_check, "probe_niced", lambda threads: {})
    monkeypatch.setattr(local_check, "hardware_toml", lambda name, m, prof: f"# {prof}\n")
    local_check.measure_machine(tmp_path)
    assert len(made) == 2  # the first lacked the all-reduce
    assert local_check._profiled(tmp_path / "gloo2.toml") == set(local_check.NEEDED_COLLECTIVES)


def test_measure_machine_gives_up_after_its_tries(monkeypatch, tmp_path: Path) -> None:
    calls = []

    def comm_profile(out: Path) -> Path:
        calls.append(1)
        out.write_text("[collectives.all_gather]" + NO_AR)
        return out

    monkeypatch.setattr(local_check, "comm_profile", comm_profile)
    monkeypatch.setattr(local_check, "probe_niced", lambda threads: {})
    monkeypatch.setattr(local_check, "hardware_toml", lambda name, m, prof: "")
    local_check.measure_machine(tmp_path, tries=3)
    assert len(calls) == 3


def test_measure_machine_keeps_the_most_complete_profile(monkeypatch, tmp_path: Path) -> None:
    one = "[collectives.reduce_scatter]\nalpha_us = 1.0\nbeta_us_per_byte = 0.001\n"
    texts = iter(["[collectives.all_gather]" + NO_AR, one, one])

    def comm_profile(out: Path) -> Path:
        out.write_text(next(texts))
        return out

    monkeypatch.setattr(local_check, "comm_profile", comm_profile)
    monkeypatch.setattr(local_check, "probe_niced", lambda threads: {})
    monkeypatch.setattr(local_check, "hardware_toml", lambda name, m, prof: "")
    local_check.measure_machine(tmp_path, tries=3)
    assert local_check._profiled(tmp_path / "gloo2.toml") == {"all_gather", "reduce_scatter"}  # the first, not the last
