"""The Dockerfile builds the image `stride launch k8s` names by default, from paths a clone has.

`docker build` is not run here (a docker client but no daemon on this machine; the last test builds
and runs the image where a daemon answers). What can be checked without one is: every path it copies
exists and is not excluded by .dockerignore, the tag it documents is the launcher's default image,
the version in that tag is the package's, and the command the PyTorchJob runs parses."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from fnmatch import fnmatch
from pathlib import Path

import pytest

import stride
from stride.cli.main import build_parser
from stride.launch.k8s import DEFAULT_IMAGE, K8sJob, build_manifests

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def test_copied_paths_exist_and_are_not_ignored() -> None:
    ignored = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines() if line.strip()]
    sources = [src for line in DOCKERFILE.splitlines() if line.startswith("COPY ") for src in line.split()[1:-1]]
    assert {"pyproject.toml", "stride", "configs"} <= set(sources)
    for src in sources:
        assert (ROOT / src).exists(), src
        assert not any(fnmatch(src, pat) for pat in ignored), (src, ignored)


def test_the_documented_tag_is_the_launchers_default_image(tmp_path: Path) -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert stride.__version__ == version and f"stride:{version}" == DEFAULT_IMAGE
    tags = set(re.findall(r"docker build -t (\S+)", DOCKERFILE))
    assert tags == {DEFAULT_IMAGE}, tags  # the CPU and the CUDA build lines
    assert re.search(r"^ARG CUDA=$", DOCKERFILE, re.M) and "whl/${CUDA:-cpu}" in DOCKERFILE
    cfg = tmp_path / "c.toml"
    cfg.write_text((ROOT / "configs" / "quickstart.toml").read_text())
    _, job = build_manifests(K8sJob(config=cfg))
    (container,) = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"]
    assert container["image"] == DEFAULT_IMAGE
    # the command it runs: torchrun (installed with torch) ... -m stride.cli.main train CONFIG --out ... --no-progress
    args = container["args"]
    assert container["command"] == ["torchrun"] and args[1:3] == ["-m", "stride.cli.main"]
    from stride.cli import train

    p = build_parser()._subparsers._group_actions[0].choices["train"]  # the registered parser, then its options
    train.register(p)
    parsed = p.parse_args(args[4:])
    assert parsed.no_progress and parsed.out.startswith("/runs/")


def _docker_daemon() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _docker_daemon(), reason="no docker daemon on this machine: the image is not built here")
def test_docker_build_cpu_image() -> None:
    subprocess.run(["docker", "build", "-t", DEFAULT_IMAGE, str(ROOT)], check=True, timeout=3600)
    out = subprocess.run(["docker", "run", "--rm", DEFAULT_IMAGE, "stride", "--version"], capture_output=True,
                         text=True, check=True)
    assert out.stdout.startswith(f"stride {stride.__version__}")
