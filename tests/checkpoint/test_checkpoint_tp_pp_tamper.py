"""Hostile checkpoints of tensor-parallel and pipeline-parallel runs (outside audit 18).

Two gloo processes train at `tp = 2` or `pp = 2` with a checkpoint every 3 steps; copies of their checkpoints are
damaged and the same config resumes from them. Each resumed run must fall back to the newest good checkpoint and
say why, naming the file, and then train exactly as the uninterrupted run did (its per-step losses compared, bit
for bit at the same layout, to 1e-5 at another one); a refusal must end every rank with the message and exit 2.

What failed before this file's fixes:
- a rank's view of a shard another rank wrote (a stale NFS client cache, a partial copy on its node) was never
  checked: at `tp = 2` rank 1 read the replicated embedding from rank 0's `__0_0.distcp` with an entry of 5e36 and
  trained on, exit 0 (losses off by up to 0.36). Every rank now checks the files its load will read.
- a shard entry that could not be read (a truncated or zeroed shard whose manifest was rewritten) was reported as
  `EOFError reading its .distcp shards: one is not what DCP wrote`, or miniz's five sentences, naming no file.
- the load read `.metadata` with DCP's plain `pickle.load` on every rank (the allow-list ran only in rank 0's check
  before it): with `verify = "size"`, a crafted `.metadata` of the genuine size in rank 1's view ran its command.
- a refused resume at `tp = 2` left the trainer's gloo groups to interpreter teardown, where a rank sometimes
  aborted (`terminate called without an active exception`, exit -6) after printing its config error.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ckpt_helpers import REPO, dead_pid, stderr_of_all, write_config
from test_checkpoint_distributed_faults import HERE, _finish, _launch, _port

from stride.checkpoint.manifest import write_manifest
from stride.files.owner import tagged_name

STEPS = 12
pytestmark = [pytest.mark.slow, pytest.mark.dist]


def _config(folder: Path, layout: str, *extra: str) -> Path:
    return write_config(folder / f"{layout}.toml", f"parallel.{layout}=2", f"train.steps={STEPS}",
                        "checkpoint.keep_last=10", *extra)


def _train(cfg: Path, out: Path) -> str:
    """`stride train CFG --out OUT` on 2 gloo ranks (no torchrun); both must exit 0; rank 0's stderr."""
    return _finish(_launch(HERE / "ckpt_signal_driver.py", ["train", str(cfg), "--out", str(out), "--no-progress"]))[0]


def _losses(run: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r and "step" in r}


def _resumed_from_step_3_exactly(out: Path, run: Path) -> None:
    """The resumed run logged steps 4.. and, in the same layout, the uninterrupted run's losses bit for bit."""
    got, want = _losses(out), _losses(run)
    assert sorted(got) == list(range(4, STEPS + 1))
    assert {s: got[s] for s in got} == {s: want[s] for s in got}


def _copy(whole: Path, out: Path, steps: tuple[int, ...]) -> Path:
    for s in steps:
        shutil.copytree(whole / "checkpoints" / f"step_{s:08d}", out / "checkpoints" / f"step_{s:08d}")
    return out / "checkpoints"


def _reseal(folder: Path) -> None:
    """Rewrite the manifest over the folder's present bytes (what a tool that 'repairs' a folder would do)."""
    old = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").unlink()
    write_manifest(folder, old["step"], {k: old[k] for k in ("config_hash", "world_size", "lineage")})


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """For tp and pp: (config, run folder) of an uninterrupted 2-rank run checkpointed at steps 3, 6, 9 and 12."""
    base = tmp_path_factory.mktemp("tp_pp_whole")
    runs = {}
    for layout in ("tp", "pp"):
        cfg = _config(base, layout)
        run = base / f"{layout}_whole"
        _train(cfg, run)
        assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [f"step_{s:08d}" for s in (3, 6, 9, 12)]
        runs[layout] = (cfg, run)
    return runs


@pytest.mark.parametrize("layout", ["tp", "pp"])
def test_damaged_checkpoints_fall_back_naming_each_file_and_resume_exactly(tmp_path: Path, whole, layout: str) -> None:
    """Step 9: rank 1's shard cut in half with its manifest rewritten (verifies, fails in DCP's read); step 6: rank
    1's second shard deleted; a save of step 10 killed midway (a tagged temporary folder of a process that is gone).
    The run removes the leftover, skips 9 and 6 naming the file and what is wrong, and from step 3 on trains as the
    uninterrupted run did, bit for bit."""
    cfg, run = whole[layout]
    out = tmp_path / "run"
    ck = _copy(run, out, (3, 6, 9))
    shard = ck / "step_00000009" / "__1_0.distcp"
    os.truncate(shard, shard.stat().st_size // 2)
    _reseal(ck / "step_00000009")
    (ck / "step_00000006" / "__1_1.distcp").unlink()
    leftover = tagged_name("tmp", "step_00000010", pid=dead_pid())
    (ck / leftover).mkdir()
    shutil.copy(run / "checkpoints" / "step_00000012" / "__0_0.distcp", ck / leftover / "__0_0.distcp")
    err = _train(cfg, out)
    assert f"removed {leftover} (a save that never committed)" in err, err[-3000:]
    line = next(ln for ln in err.splitlines() if "could not load step_00000009" in ln)
    # before: "(EOFError reading its .distcp shards: one is not what DCP wrote (cut short, or other bytes))", no file
    assert "reading its .distcp shards, at __1_0.distcp bytes " in line, line
    assert "one is not what DCP wrote (cut short, or other bytes)); falling back to step_00000003" in line, line
    assert "skipped step_00000006: __1_1.distcp is missing" in err, err[-3000:]
    assert "resuming from step_00000003" in err
    assert not (ck / leftover).exists()
    _resumed_from_step_3_exactly(out, run)  # the same layout: bit for bit


@pytest.mark.parametrize(("saved", "now"), [("tp", "pp"), ("pp", "tp")])
def test_a_tp_checkpoint_resumes_at_pp_and_the_reverse(tmp_path: Path, whole, saved: str, now: str) -> None:
    """DCP reshards: tp = 2 -> pp = 2 and back are layout changes, resumed and reported; the losses after the resume
    are the uninterrupted run's up to another layout's rounding (1.2e-7 measured)."""
    out = tmp_path / "run"
    _copy(whole[saved][1], out, (3, 6))
    err = _train(whole[now][0], out)
    assert "resuming from step_00000006" in err and f"parallel.{saved}: 2 (checkpoint) -> 1 (now)" in err, err[-3000:]
    assert f"parallel.{now}: 1 (checkpoint) -> 2 (now)" in err
    got, want = _losses(out), _losses(whole[saved][1])
    assert sorted(got) == list(range(7, STEPS + 1))
    for s in got:
        assert got[s] == pytest.approx(want[s], rel=1e-5, abs=1e-6), (s, got[s], want[s])


def _can_bind_mount(tmp_path: Path) -> str:
    """'' if this process may give a child its own mount namespace with a bind mount (root, or CAP_SYS_ADMIN)."""
    if shutil.which("unshare") is None:
        return "no `unshare` here"
    a, b = tmp_path / "probe_a", tmp_path / "probe_b"
    a.write_text("a")
    b.write_text("b")
    r = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind {b} {a} && cat {a}"], capture_output=True,
                       text=True)
    a.unlink()
    b.unlink()
    if r.returncode == 0 and r.stdout == "b":
        return ""
    return f"cannot bind-mount in a mount namespace: {r.stderr.strip()}"


def _train_where_rank_1_sees(cfg: Path, out: Path, target: Path, instead: Path, *args: str) -> str:
    """`stride train` on 2 gloo ranks where rank 1 (in a mount namespace of its own: its "node") sees the bytes of
    `instead` at `target` and the shared folder as rank 0 sees it otherwise; both must exit 0; rank 0's stderr."""
    port = str(_port())
    procs = []
    for rank in (0, 1):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": port, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore",
               "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
        cmd = [sys.executable, str(HERE / "ckpt_signal_driver.py"), "train", str(cfg), "--out", str(out),
               "--no-progress", *args]
        if rank == 1:
            cmd = ["unshare", "-m", "sh", "-c", f'mount --bind "{instead}" "{target}" && exec "$@"', "sh", *cmd]
        procs.append(subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    return _finish(procs)[0]


def test_a_shard_that_differs_in_rank_1s_view_of_rank_0s_file_is_never_loaded(tmp_path: Path, whole) -> None:
    """Two nodes whose views of the shared folder differ in one file rank 0 wrote: rank 1 runs in its own mount
    namespace with another copy of step 6's `__0_0.distcp` bound over it (same size; one float of the replicated
    embedding, which rank 1 reads from rank 0's file, 0.015 -> 5e36). Before: rank 1 checked only its own shards,
    loaded that value and trained on, exit 0, losses off by up to 0.36. Now every rank checks the files its load
    reads: both skip step 6, naming rank 1's view and the file, and train on from step 3 exactly."""
    import io

    import torch

    from stride.checkpoint.safe_read import load_metadata_safely

    if why := _can_bind_mount(tmp_path):
        pytest.skip(why)
    cfg, run = whole["tp"]
    out = tmp_path / "run"
    step6 = _copy(run, out, (3, 6)) / "step_00000006"
    md = load_metadata_safely((step6 / ".metadata").read_bytes())
    (info,) = [s for i, s in md.storage_data.items() if i.fqn == "model.embed.weight" and s.relative_path[:3] == "__0"]
    shard = step6 / info.relative_path
    raw = bytearray(shard.read_bytes())
    entry = bytes(raw[info.offset:info.offset + info.length])
    values = torch.load(io.BytesIO(entry), weights_only=True).contiguous()
    at = info.offset + entry.find(values.numpy().tobytes()) + 4 * 3 + 3  # the 4th float's sign/exponent byte
    raw[at] ^= 0x40
    other = tmp_path / "rank1_copy.distcp"
    other.write_bytes(bytes(raw))
    changed = torch.load(io.BytesIO(bytes(raw[info.offset:info.offset + info.length])), weights_only=True)
    assert abs(float(changed.flatten()[3])) > 1e30  # the copy rank 1 sees holds a value no training made

    err = _train_where_rank_1_sees(cfg, out, shard, other)
    assert ("could not load step_00000006 (in rank 1's view of the folder, __0_0.distcp does not match its xxh3_128 "
            "checksum (corrupted, or another copy) (checkpoint.dir must be a folder every node shares") in err, \
        err[-3000:]
    assert "falling back to step_00000003" in err and "resuming from step_00000003" in err
    _resumed_from_step_3_exactly(out, run)  # before: 0.10, 0.05, 0.26, ... off from step 7


def test_a_crafted_metadata_in_rank_1s_view_never_runs_code(tmp_path: Path, whole) -> None:
    """`checkpoint.verify = "size"`, and rank 1's view of step 6's `.metadata` is the issue-19 exploit (a Metadata
    whose pickle calls subprocess.Popen through a dotted name) padded to the genuine file's size. Before: the
    allow-list unpickler ran only in rank 0's check; the load itself read `.metadata` with DCP's plain
    `pickle.load` on every rank (`SafeFileSystemReader.read_metadata` had slipped into the class below it), so
    rank 1 ran the command and resumed from step 6, exit 0. Now every rank's load goes through the allow-list:
    nothing runs, every rank skips step 6 naming rank 1 and the refused global, and resumes from step 3 exactly."""
    import importlib

    if why := _can_bind_mount(tmp_path):
        pytest.skip(why)
    sys.path.insert(0, str(REPO / "tests" / "faults"))
    try:
        hostile = importlib.import_module("hostile_pickle")
    finally:
        sys.path.remove(str(REPO / "tests" / "faults"))
    if not hostile.popen_path_resolves():
        pytest.skip("torch no longer reaches subprocess.Popen through that path: the exploit needs another one")
    cfg, run = whole["tp"]
    out = tmp_path / "run"
    meta = _copy(run, out, (3, 6)) / "step_00000006" / ".metadata"
    ran = tmp_path / "ran"
    genuine = meta.read_bytes()
    crafted = hostile.popen_metadata(genuine, ["touch", str(ran)])
    assert len(crafted) < len(genuine)
    other = tmp_path / "rank1_metadata"
    other.write_bytes(crafted + bytes(len(genuine) - len(crafted)))  # pickle stops at STOP: the padding is unread
    err = _train_where_rank_1_sees(cfg, out, meta, other, "--set", 'checkpoint.verify="size"')
    assert not ran.exists(), "the crafted .metadata ran its command"
    assert ("could not load step_00000006 (on rank 1: UnpicklingError: .metadata refers to "
            "torch.distributed.checkpoint.metadata:torch._strobelight.cli_function_profiler.subprocess.Popen") in err, \
        err[-3000:]
    assert "falling back to step_00000003" in err and "resuming from step_00000003" in err
    _resumed_from_step_3_exactly(out, run)


DRIVER = """
import json, os, sys
import torch.distributed as dist
from stride.cli.main import main

code = main(sys.argv[1:])
with open(os.path.join(os.environ["SEEN"], f"rank{os.environ['RANK']}.json"), "w") as f:
    json.dump({"code": code, "groups_left": dist.is_initialized()}, f)
raise SystemExit(code)
"""


def test_a_refused_resume_at_tp_2_releases_every_rank_before_it_exits(tmp_path: Path, whole) -> None:
    """A resume refused with a config diff (optim.lr changed) at tp = 2: every rank prints the diff and exits 2 with
    its process groups released. Before, the ConfigError path returned with them still up (the CheckpointError path
    already released them), and interpreter teardown sometimes aborted a rank (exit -6; 2 of 3 and 1 of 4 runs)."""
    cfg, run = whole["tp"]
    out = tmp_path / "run"
    _copy(run, out, (3, 6))
    driver, seen = tmp_path / "driver.py", tmp_path / "seen"
    driver.write_text(DRIVER)
    seen.mkdir()
    procs = _launch(driver, ["train", str(cfg), "--out", str(out), "--no-progress", "--set", "optim.lr=0.002"],
                    SEEN=str(seen))
    errs = stderr_of_all(procs)
    for rank, (p, err) in enumerate(zip(procs, errs, strict=True)):
        assert p.returncode == 2, f"rank {rank} exited with {p.returncode}:\n{err[-3000:]}"
        assert "stride train: config error: checkpoint " in err and "optim.lr: 0.001 (checkpoint) -> 0.002 (now)" in err
        assert "terminate called" not in err
        assert json.loads((seen / f"rank{rank}.json").read_text()) == {"code": 2, "groups_left": False}
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_00000003", "step_00000006"]
