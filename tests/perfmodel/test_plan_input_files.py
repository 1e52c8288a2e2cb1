"""`stride plan --hardware-file` and `--efficiency` on a path that is not a regular file (audit F4).

`--hardware-file /dev/zero` read until memory ran out and a FIFO blocked forever (both: timeout's rc 124); they
are now refused at once, exit 2, naming the path and what it is. The command runs in a subprocess with a timeout,
so a reader that opened the FIFO fails the test rather than hang it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from stride.config.errors import ConfigError
from stride.perfmodel import efficiency, hardware
from stride.perfmodel.efficiency import read_factors
from stride.perfmodel.hardware import load_catalog

PLAN = ["plan", "--model", "llama3-8b", "--devices", "8"]



def _inputs(fifo: Path) -> list[tuple[str, str]]:
    """(path, what it is): the FIFO, and /dev/zero where there is one."""
    return [(str(fifo), "a FIFO")] + ([("/dev/zero", "a character device")] if os.path.exists("/dev/zero") else [])


def _plan(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([sys.executable, "-m", "stride", *PLAN, *args], capture_output=True, text=True,
                              timeout=20, cwd=cwd)
    except subprocess.TimeoutExpired:
        pytest.fail(f"stride plan {' '.join(args)} hung (it read the input instead of refusing it)")


@pytest.mark.parametrize("option, what", [("--hardware-file", "hardware file"), ("--efficiency", "efficiency file")])
def test_plan_refuses_a_fifo_or_dev_zero_at_once(option: str, what: str, fifo: Path, tmp_path: Path) -> None:
    for path, kind in _inputs(fifo):
        r = _plan(option, path, cwd=tmp_path)
        assert r.returncode == 2, r.stderr
        assert f"stride plan: config error: {what} {path} is {kind}, not a regular file" in r.stderr, r.stderr


def test_readers_name_the_path_and_keep_their_messages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"^hardware file .* is a directory, not a regular file$"):
        load_catalog(tmp_path)
    with pytest.raises(ConfigError, match=r"^hardware file not found: .*nope\.toml$"):
        load_catalog(tmp_path / "nope.toml")
    with pytest.raises(ConfigError, match=r"^efficiency file .* is a directory, not a regular file$"):
        read_factors(tmp_path)
    with pytest.raises(ConfigError, match=r"^efficiency file not found: .*nope\.json$"):
        read_factors(tmp_path / "nope.json")
    big = tmp_path / "big.json"
    big.write_text('{"gemm": 0.8}' + " " * 100)
    monkeypatch.setattr(efficiency, "_MAX_FILE_BYTES", 64)
    with pytest.raises(ConfigError, match=r"^efficiency file .*big\.json is 113 bytes, over the limit of 64 bytes$"):
        read_factors(big)


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="no alarm signal to guard the FIFO with")
def test_a_comm_profile_named_by_a_hardware_file_is_checked_too(fifo: Path, tmp_path: Path) -> None:
    hw = tmp_path / "hw.toml"
    hw.write_text(f'[hardware.test-cpu]\nbase = "epyc-9654"\ncomm_profile = "{fifo.name}"\n')

    def _hung(signum, frame):
        raise TimeoutError("reading the comm_profile FIFO blocked")

    old = signal.signal(signal.SIGALRM, _hung)
    signal.alarm(20)  # in-process: fail, not hang, should the FIFO be opened for a blocking read
    try:
        with pytest.raises(ConfigError, match=r"comm_profile file .*input.toml is a FIFO, not a regular file$"):
            load_catalog(hw)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_a_hardware_file_over_the_limit_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    limit = hardware.DEFAULT_CATALOG.stat().st_size  # the shipped catalog is read with the same limit
    hw = tmp_path / "hw.toml"
    hw.write_text('[hardware.test-cpu]\nbase = "epyc-9654"\n')
    monkeypatch.setattr(hardware, "_MAX_FILE_BYTES", limit)
    assert load_catalog(hw).get("test-cpu")  # read as before
    hw.write_text(hw.read_text() + "#" * limit)
    size = hw.stat().st_size
    with pytest.raises(ConfigError, match=rf"^hardware file .*hw\.toml is {size} bytes .*, over the limit of {limit} "):
        load_catalog(hw)


def test_a_display_name_with_markup_and_an_escape_is_shown_as_written(tmp_path: Path) -> None:
    """A hardware file's display name is text (audit 14): `[/y]` ended `stride plan` with a MarkupError traceback,
    and an ESC reached the terminal raw."""
    hw = tmp_path / "hw.toml"
    hw.write_text('[hardware.test-cpu]\nbase = "epyc-9654"\ndisplay_name = "x[/y] \\u001b[31mred"\n')
    r = _plan("--hardware-file", str(hw), "--hardware", "test-cpu", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "\x1b" not in r.stdout
    assert "x[/y] \\x1b[31mred" in r.stdout, r.stdout
