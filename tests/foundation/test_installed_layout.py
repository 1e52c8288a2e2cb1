"""What `pip install .` puts in site-packages (the Docker image's stride too) holds the data files stride
reads: the hardware catalog of `stride plan` and the price table of `stride report`.

Before: both were read from the clone's configs/ (the catalog two folders above the package, the prices
relative to the current directory), so an installed stride failed with "hardware file not found:
.../configs/hardware.toml" and "price table not found: configs/prices.toml".
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_an_installed_stride_finds_its_hardware_catalog_and_prices(tmp_path: Path) -> None:
    pytest.importorskip("setuptools", reason="setuptools builds the installed layout")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "stride", src / "stride", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    lib = tmp_path / "site-packages"  # build_py copies the packages and their package-data, as a wheel has them
    p = subprocess.run([sys.executable, "-c", "from setuptools import setup; setup()", "-q", "build_py",
                        "--build-lib", str(lib)], cwd=src, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert not (lib / "configs").exists()
    code = ("import stride.perfmodel.hardware as h, stride.report.recommend as r\n"
            "assert h.__file__.startswith(" + repr(str(lib)) + "), h.__file__\n"
            "print(len(h.load_catalog().names()) > 5, r.load_prices()['cpu'] > 0)")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    p = subprocess.run([sys.executable, "-c", code], cwd=elsewhere, capture_output=True, text=True, timeout=300,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(lib)})
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == ["True", "True"]
