"""A run config that is not a regular file (audit F4): refused at once, saying what the path is.

`stride train/profile/sweep FIFO` said "config file not found: FIFO" (the path exists: it is a FIFO), and
/dev/zero the same. The commands run in a subprocess with a timeout, so a loader that opened the FIFO would fail
the test rather than hang it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from stride.config import ConfigError, load_config, loader

needs_dev_zero = pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero on this platform")



def _stride(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([sys.executable, "-m", "stride", *args], capture_output=True, text=True, timeout=20,
                              cwd=cwd)
    except subprocess.TimeoutExpired:
        pytest.fail(f"stride {' '.join(args)} hung (it read the input instead of refusing it)")


@pytest.mark.parametrize("command", ["train", "profile", "sweep"])
def test_fifo_config_is_named_a_fifo(command: str, fifo: Path, tmp_path: Path) -> None:
    r = _stride(command, str(fifo), cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert f"config file {fifo} is a FIFO, not a regular file" in r.stderr
    assert "not found" not in r.stderr


@needs_dev_zero
def test_dev_zero_config_is_named_a_device(tmp_path: Path) -> None:
    r = _stride("train", "/dev/zero", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "config file /dev/zero is a character device, not a regular file" in r.stderr


def test_loader_errors_say_what_the_path_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"^config file .* is a directory, not a regular file$"):
        load_config(tmp_path)
    with pytest.raises(ConfigError, match=r"^config file not found: .*missing\.toml$"):
        load_config(tmp_path / "missing.toml")
    big = tmp_path / "big.toml"
    big.write_text("# a comment\n" * 10)
    monkeypatch.setattr(loader, "CONFIG_MAX_BYTES", 100)
    with pytest.raises(ConfigError, match=r"big\.toml is 120 bytes, over the limit of 100 bytes$"):
        load_config(big)
    latin1 = tmp_path / "latin1.toml"
    latin1.write_bytes(b'[train]\nname = "caf\xe9"\n')
    with pytest.raises(ConfigError, match=r"not a TOML config \(not UTF-8 text: byte 0xe9"):  # as before
        load_config(latin1)
