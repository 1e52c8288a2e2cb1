"""`stride launch k8s` refuses a precision its pods would refuse, before writing the job (outside review).

The launcher's config check leaves the checks that read the model to the pods when the model or the data exist only
in the image (a data store, a `module:factory`), and the precision check, which reads no model, was skipped with
them: a job with train.precision = fp16 and parallel.tp = 2 was written, and every pod refused it at start. Slurm
and `stride train --nproc` refuse it before launching; k8s now does too, with the same message (the same check).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stride.cli.main import main

TINY = "[train]\nsteps = 2\nbatch_size = 16\nval_every = 0\nthreads = 1\n[data]\nn_assets = 2\nn_steps = 512\n" \
       "seq_len = 8\nhorizons = [1]\n[metrics]\nprogress = false\n"
IN_POD = ["--set", "data.source=store", "--set", "data.store=/pod/store"]  # a store only the image holds
LAYOUT = ["--procs-per-node", "4", "--set", "parallel.tp=2", "--set", "parallel.dp_shard=2"]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    p = tmp_path / "c.toml"
    p.write_text(TINY)
    return p


def _refusal(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    out = capsys.readouterr()
    assert out.out == ""  # nothing written
    return out.err.strip()


@pytest.mark.parametrize("bad, words", [
    (["--set", "train.precision=fp16"], "`train.precision` = 'fp16' with `parallel.tp` = 2"),
    (["--set", "parallel.tp=1", "--set", "parallel.pp=2", "--set", "parallel.mp_param_dtype=fp16"],
     "`parallel.mp_param_dtype` = 'fp16' with `train.precision` = 'fp32'"),
])
def test_k8s_refuses_a_precision_the_pods_would_refuse_as_slurm_does(
        config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: list[str], words: str) -> None:
    out = tmp_path / "job.yaml"
    k8s = _refusal(["launch", "k8s", str(config), *LAYOUT, *IN_POD, *bad, "-o", str(out)], capsys)
    assert not out.exists()
    slurm = _refusal(["launch", "slurm", str(config), *LAYOUT, *bad, "--dry-run"], capsys)
    assert words in k8s and k8s == slurm  # one message: the same check


def test_k8s_still_writes_a_pod_only_job_with_bf16(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch", "k8s", str(config), *LAYOUT, *IN_POD, "--set", "train.precision=bf16"]) == 0
    assert 'kind: "PyTorchJob"' in capsys.readouterr().out
