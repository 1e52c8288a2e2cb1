"""Bad input to `stride launch`, `stride train --nproc` and `stride data synth`: refused in one line, exit 2.

- `launch slurm` / `launch k8s` used to write and sbatch (or print) a job from a config they never read: an
  unknown key or a `[parallel]` layout that does not fit the job's processes surfaced only on the cluster,
  after the queue. They now load it as `stride train` does and check the layout against nodes x processes.
- `train --nproc 0` (and `--nnodes 0`) ran one process; `--nproc -2` was refused.
- `data synth --levels -1` leaked numpy's "negative dimensions are not allowed"; `--out` naming a file
  exited 1 (a machine state) instead of 2 (bad input).
- Several options of `data` and `launch` had no help text or no stated default.
"""

from __future__ import annotations

import argparse
import importlib
import os
from pathlib import Path

import pytest
from fault_helpers import one_line_error, stride_main

from stride.config import ConfigError
from stride.launch.torchrun import torchrun_command

TINY = "[train]\nsteps = 2\nbatch_size = 16\nval_every = 0\nthreads = 1\n[data]\nn_assets = 2\nn_steps = 512\n" \
       "seq_len = 8\nhorizons = [1]\n[metrics]\nprogress = false\n"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    p = tmp_path / "c.toml"
    p.write_text(TINY)
    return p


@pytest.fixture
def sbatch_stub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An `sbatch` first on PATH that leaves a marker if it is ever run (nothing must be queued)."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    marker = tmp_path / "SBATCH_RAN"
    (stubs / "sbatch").write_text(f"#!/bin/sh\ntouch {marker}\necho 77\n")
    (stubs / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{stubs}{os.pathsep}{os.environ['PATH']}")
    return marker


# (extra arguments, words the one-line error must hold)
BAD_CONFIGS = [
    (["--set", "optim.lrr=3"], ["config error", "optim.lrr", "optim.lr"]),
    (["--set", "parallel.dp_shard=3"], ["config error", "dp_shard=3", "world size is 16"]),
    (["--set", "train.batch_size=12", "--set", "parallel.dp_shard=16"], ["config error", "train.batch_size"]),
]


@pytest.mark.parametrize("extra, words", BAD_CONFIGS)
@pytest.mark.parametrize("dry_run", [True, False])
def test_slurm_checks_the_config_before_writing_or_submitting(config: Path, tmp_path: Path, sbatch_stub: Path,
                                                              extra: list[str], words: list[str],
                                                              dry_run: bool) -> None:
    out_dir = tmp_path / "runs"
    res = stride_main("launch", "slurm", str(config), "--nodes", "2", "--gpus-per-node", "8", "--out-dir",
                      str(out_dir), *extra, *(["--dry-run"] if dry_run else []))
    one_line_error(res, "stride launch", *words, codes=(2,))
    assert res.out == ""  # no script printed
    assert not sbatch_stub.exists() and not out_dir.exists()  # nothing queued, nothing written


def test_slurm_checks_a_config_files_own_keys(tmp_path: Path, sbatch_stub: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[train]\nstep = 5\n")
    for dry in ([], ["--dry-run"]):
        res = stride_main("launch", "slurm", str(bad), "--out-dir", str(tmp_path / "runs"), *dry)
        one_line_error(res, "config error", "train.step", "bad.toml", codes=(2,))
        assert res.out == "" and not sbatch_stub.exists() and not (tmp_path / "runs").exists()


def test_slurm_checks_the_model_against_tp(config: Path) -> None:
    """The layout checks that read the model run too (the tiny model has 4 heads: tp=3 does not divide them)."""
    res = stride_main("launch", "slurm", str(config), "--procs-per-node", "6", "--set", "parallel.tp=3",
                      "--set", "parallel.dp_shard=2", "--set", "train.batch_size=12", "--dry-run")
    one_line_error(res, "config error", "parallel.tp", codes=(2,))


@pytest.mark.parametrize("extra, words", BAD_CONFIGS)
def test_k8s_checks_the_config_before_writing(config: Path, tmp_path: Path, extra: list[str],
                                              words: list[str]) -> None:
    out = tmp_path / "job.yaml"
    for where in ([], ["-o", str(out)]):
        res = stride_main("launch", "k8s", str(config), "--nodes", "2", "--gpus-per-node", "8", *extra, *where)
        one_line_error(res, "stride launch", *words, codes=(2,))
        assert res.out == "" and not out.exists()


def test_k8s_leaves_a_pod_only_store_to_the_pods_but_checks_degrees_and_batch(config: Path) -> None:
    """A store path inside the pod is not on this machine: the model checks wait for the ranks, the rest runs."""
    pod = ["--procs-per-node", "4", "--set", "data.source=store", "--set", "data.store=/pod/store",
           "--set", "parallel.tp=2", "--set", "parallel.dp_shard=2"]
    res = stride_main("launch", "k8s", str(config), *pod)
    assert res.code == 0, res.err
    assert 'kind: "PyTorchJob"' in res.out
    one_line_error(stride_main("launch", "k8s", str(config), *pod, "--set", "train.batch_size=3"),
                   "train.batch_size", codes=(2,))


@pytest.mark.parametrize("argv, named", [
    (["launch", "k8s", "{config}", "--procs-per-node", "0"], "--procs-per-node"),
    (["launch", "slurm", "{config}", "--cpus-per-task", "0", "--dry-run"], "--cpus-per-task"),
])
def test_launch_refuses_counts_below_one(config: Path, argv: list[str], named: str) -> None:
    res = stride_main(*[a.format(config=config) for a in argv])
    one_line_error(res, named, ">= 1", codes=(2,))
    assert res.out == ""


# -- stride train --nproc / --nnodes ---------------------------------------------------------------------------------

@pytest.mark.parametrize("flag, value", [("--nproc", "0"), ("--nproc", "-2"), ("--nnodes", "0")])
def test_train_refuses_a_process_count_below_one(config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 flag: str, value: str) -> None:
    monkeypatch.chdir(tmp_path)  # unfixed, --nproc 0 trained here in one process
    res = stride_main("train", str(config), flag, value)
    one_line_error(res, "stride train", f"{flag} {value} must be >= 1", codes=(2,))
    assert not (tmp_path / "runs").exists()


def test_torchrun_command_names_only_the_bad_flag() -> None:
    with pytest.raises(ConfigError) as info:
        torchrun_command(["c.toml"], nproc=2, max_restarts=-1)
    assert str(info.value) == "--max-restarts -1 must be >= 0"


# -- stride data synth -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("flag, value, allowed", [
    ("--assets", "0", ">= 1"), ("--days", "0", ">= 1"), ("--days", "-3", ">= 1"), ("--levels", "-1", ">= 0"),
    ("--seed", "-1", ">= 0"),
])
def test_synth_names_a_bad_number_and_its_range(tmp_path: Path, flag: str, value: str, allowed: str) -> None:
    out = tmp_path / "syn"
    args = {"--assets": "1", "--days": "1", flag: value}
    res = stride_main("data", "synth", "--out", str(out), *[x for kv in args.items() for x in kv])
    last = one_line_error(res, "stride data synth", f"{flag} {value}", allowed, codes=(2,))
    assert "negative dimensions" not in last
    assert not out.exists()


@pytest.mark.parametrize("under", ["", "sub"])
def test_synth_out_naming_a_file_is_bad_input(tmp_path: Path, under: str) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    out = blocker / under if under else blocker
    res = stride_main("data", "synth", "--out", str(out), "--assets", "1", "--days", "1")
    one_line_error(res, "stride data synth", "--out", f"{blocker} is a file, not a directory", codes=(2,))
    assert blocker.read_text() == "x"


def test_ingest_out_under_a_file_names_the_file(tmp_path: Path) -> None:
    """Before: `cannot create afile/.tmp-...-sub: File exists`, which did not say that afile is a file."""
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    csv_path = tmp_path / "d.csv"
    csv_path.write_text("timestamp,symbol,close\n2024-01-01T00:00:00,A,1.0\n")
    res = stride_main("data", "ingest", str(csv_path), "--out", str(blocker / "sub"))
    one_line_error(res, "stride data ingest", f"{blocker} is a file, not a directory", codes=(2,))
    assert blocker.read_text() == "x"


# -- help texts ------------------------------------------------------------------------------------------------------

def _subparser(command: str, sub: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"stride {command}")
    importlib.import_module(f"stride.cli.{command}").register(parser)
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return subs.choices[sub]


@pytest.mark.parametrize("command, sub, flag, shown", [
    ("data", "synth", "--assets", "(default: 64)"), ("data", "synth", "--days", "(default: 250)"),
    ("data", "synth", "--seed", "(default: 0)"), ("data", "synth", "--levels", "(default: 5)"),
    ("data", "synth", "--overwrite", "default"),
    ("data", "ingest", "--time-col", "(default: timestamp)"), ("data", "ingest", "--dtype", "(default: float32)"),
    ("data", "ingest", "--overwrite", "default"), ("data", "inspect", "--json", "default"),
    ("launch", "slurm", "--partition", "default"), ("launch", "slurm", "--job-name", "(default: stride)"),
    ("launch", "slurm", "--cpus-per-task", "default"),
    ("launch", "k8s", "--namespace", "(default: default)"), ("launch", "k8s", "--backoff-limit", "(default: 3)"),
    ("launch", "k8s", "--restart-policy", "(default: OnFailure)"),
])
def test_options_say_what_they_do_and_their_default(command: str, sub: str, flag: str, shown: str) -> None:
    p = _subparser(command, sub)
    action = next(a for a in p._actions if flag in a.option_strings)
    assert action.help and len(action.help.split()) >= 3, f"{flag}: no help text"
    shown_help = p._get_formatter()._expand_help(action)  # as --help prints it: %(default)s filled in
    assert shown in shown_help, f"{flag}: {shown!r} not in its help {shown_help!r}"
    assert " ".join(shown_help.split()) in " ".join(p.format_help().split())
