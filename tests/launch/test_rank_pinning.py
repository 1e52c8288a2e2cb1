"""`stride train --nproc N` on CPU pins each rank to cores of its own where they fit (parallel.pin_ranks).

The plan is the same on every rank (the config, LOCAL_WORLD_SIZE and the launcher's affinity), never pins ranks that
do not fit the usable cores, leaves GPU runs and other launchers' ranks alone unless asked, and is recorded in
summary.json; pinning changes where the threads run, not what they compute (params_sha256).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from launch_guard import children_killed_after

import stride.train.rank_cores as rank_cores
from stride.cli.main import main
from stride.config import load_config
from stride.config.errors import ConfigError
from stride.files.rank_share import PINNED_APART_ENV
from stride.launch.lifeline import ENV_LAUNCHER
from stride.launch.torchrun import HOST_IDLE_ENV, idle_cores
from stride.train.rank_cores import LAUNCHED_BY_STRIDE_ENV, plan_rank_pinning, rank_core_sets


def test_the_launchers_variables_are_the_ones_the_ranks_read() -> None:
    assert LAUNCHED_BY_STRIDE_ENV == ENV_LAUNCHER
    assert rank_cores.HOST_IDLE_ENV == HOST_IDLE_ENV


def test_the_launcher_reads_idle_cores_of_its_affinity() -> None:
    idle = idle_cores(0.05)
    if sys.platform.startswith("linux"):
        assert idle is not None and 0.0 <= idle <= len(os.sched_getaffinity(0)) + 1e-9


@pytest.mark.parametrize(("setting", "idle", "pinned"), [
    ("auto", 2.0, True), ("auto", 1.6, True), ("auto", 1.2, False), ("auto", 0.0, False), ("auto", None, True),
    (True, 0.0, True),  # asked for: pinned whatever the load
])
def test_auto_leaves_ranks_unpinned_on_a_host_busy_at_launch(setting, idle, pinned) -> None:
    plan = plan_rank_pinning(setting, on_cpu=True, local_world=2, threads=1, cores=(0, 1), by_stride=True, idle=idle)
    assert plan.pinned == pinned, plan.reason
    if not pinned:
        assert "busy at launch" in plan.reason


def test_core_sets_are_apart_and_in_order_or_none_where_they_do_not_fit() -> None:
    assert rank_core_sets(2, 1, (0, 1)) == ((0,), (1,))
    assert rank_core_sets(2, 2, (0, 1, 2, 3)) == ((0, 1), (2, 3))
    assert rank_core_sets(2, 1, (4, 6, 9)) == ((4,), (6,))  # the launcher's affinity, not cores 0..N-1
    assert rank_core_sets(3, 1, (0, 1)) is None
    assert rank_core_sets(2, 2, (0, 1, 2)) is None


@pytest.mark.parametrize(("setting", "on_cpu", "world", "threads", "cores", "by_stride", "want"), [
    ("auto", True, 2, 1, (0, 1), True, ((0,), (1,))),
    ("auto", True, 2, None, (0, 1), True, ((0,), (1,))),  # threads unset: the launcher's OMP_NUM_THREADS=1
    ("auto", True, 2, 2, (0, 1, 2, 3), True, ((0, 1), (2, 3))),
    ("auto", True, 2, 2, (0, 1), True, None),  # 4 threads on 2 cores: not pinned
    ("auto", True, 3, 1, (0, 1), True, None),  # more ranks than cores
    ("auto", True, 1, 1, (0, 1), True, None),  # one rank here: nothing to keep apart
    (True, True, 1, 1, (0, 1), True, ((0,),)),
    ("auto", False, 2, 1, (0, 1), True, None),  # GPU: not measured
    ("auto", True, 2, 1, (0, 1), False, None),  # torchrun by hand, another launcher
    (False, True, 2, 1, (0, 1), True, None),
    (True, True, 2, 1, (0, 1), False, ((0,), (1,))),
    (True, False, 2, None, (0, 1, 2, 3), False, ((0, 1), (2, 3))),  # GPU asked for: an equal share each
    (True, True, 3, 1, (0, 1), True, None),  # asked for, but they do not fit
])
def test_plan(setting, on_cpu, world, threads, cores, by_stride, want) -> None:
    plan = plan_rank_pinning(setting, on_cpu=on_cpu, local_world=world, threads=threads, cores=cores,
                             by_stride=by_stride)
    assert plan.pinned == (want is not None), plan.reason
    assert plan.cores == (want or ())
    assert plan.reason
    rec = plan.record()
    assert rec["pinned"] == plan.pinned and rec["cores_by_local_rank"] == ([list(c) for c in want] if want else None)


def test_no_affinity_call_is_not_pinned() -> None:
    plan = plan_rank_pinning("auto", on_cpu=True, local_world=2, threads=1, cores=(0, 1), by_stride=True,
                             affinity_call=False)
    assert not plan.pinned and "sched_setaffinity" in plan.reason


def test_the_switch_takes_auto_true_false_and_nothing_else() -> None:
    assert load_config().parallel.pin_ranks == "auto"
    assert load_config(overrides=["parallel.pin_ranks=false"]).parallel.pin_ranks is False
    assert load_config(overrides=["parallel.pin_ranks=true"]).parallel.pin_ranks is True
    with pytest.raises(ConfigError, match="pin_ranks"):
        load_config(overrides=["parallel.pin_ranks=2"])


@pytest.fixture
def rank_env(monkeypatch):
    """A rank of `stride train --nproc 2` as torchrun starts it; pinning recorded, not applied to pytest itself."""
    pinned: list[tuple[int, ...]] = []
    monkeypatch.setattr(rank_cores, "pin_threads", lambda cores: pinned.append(tuple(cores)))
    monkeypatch.setattr(rank_cores, "available_cores", lambda: (0, 1))
    monkeypatch.setattr(rank_cores, "_applied", [])
    monkeypatch.delenv(PINNED_APART_ENV, raising=False)
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv(LAUNCHED_BY_STRIDE_ENV, "12345")
    monkeypatch.setenv(HOST_IDLE_ENV, "2.00")
    return pinned


def test_a_rank_pins_itself_once_to_its_own_core(rank_env) -> None:
    plan = rank_cores.pin_this_rank("auto", True, 1)
    assert plan is not None and plan.pinned and rank_env == [(1,)]
    assert os.environ[PINNED_APART_ENV] == "1"  # the threads warning and summary count this rank alone
    assert rank_cores.pin_this_rank("auto", True, 1) is plan and rank_env == [(1,)]  # a second trainer: as it was


def test_a_rank_its_launcher_pinned_is_left_alone(rank_env, monkeypatch) -> None:
    monkeypatch.setenv(PINNED_APART_ENV, "1")  # stride bench's world sweep, stride plan's local runs
    plan = rank_cores.pin_this_rank("auto", True, 1)
    assert plan is not None and plan.pinned and not plan.cores and rank_env == []


def test_outside_a_launcher_nothing_happens(rank_env, monkeypatch) -> None:
    monkeypatch.delenv("LOCAL_RANK")
    assert rank_cores.pin_this_rank(True, True, 1) is None and rank_env == []


def test_switched_off_a_rank_is_left_alone(rank_env) -> None:
    plan = rank_cores.pin_this_rank(False, True, 1)
    assert plan is not None and not plan.pinned and rank_env == []
    assert plan.record() == {"setting": False, "pinned": False, "cores_by_local_rank": None, "reason": plan.reason}
    assert PINNED_APART_ENV not in os.environ


def test_asked_for_but_not_fitting_warns(rank_env, monkeypatch, caplog) -> None:
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    plan = rank_cores.pin_this_rank(True, True, 1)
    assert plan is not None and not plan.pinned and rank_env == []
    assert "pin_ranks = true" in caplog.text and "do not fit" in caplog.text


TINY = ["--set", "model.d_model=32", "--set", "model.n_layers=2", "--set", "data.n_assets=4",
        "--set", "data.n_steps=600", "--set", "data.seq_len=16", "--set", "train.batch_size=8",
        "--set", "train.steps=4", "--set", "train.val_every=0", "--set", "metrics.flops=false",
        "--set", "train.threads=1", "--set", "parallel.dp_shard=2"]


def _train(tmp_path: Path, capfd: pytest.CaptureFixture[str], name: str, *extra: str) -> dict:
    """`stride train --nproc 2` with this process as the launcher (the ranks are torchrun's processes as ever)."""
    out = tmp_path / name
    with children_killed_after(300):
        rc = main(["train", str(tmp_path / "c.toml"), "--nproc", "2", "--out", str(out), "--no-progress", *TINY,
                   *extra])
    err = capfd.readouterr().err
    assert rc == 0, err[-3000:]
    return json.loads((out / "summary.json").read_text())


@pytest.mark.dist
@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs 2 usable cores and sched_setaffinity")
def test_two_ranks_are_pinned_apart_and_train_the_same_weights(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Pinned on request, and by default unless the host was busy at launch; unpinned ranks train the same weights.

    The unpinned run is the default's where the host was busy at launch (a test suite beside it, as in CI), else one
    with `pin_ranks = false`: two launches or three where three always ran (the switched-off rank's plan is checked
    in-process above)."""
    for var in ("WORLD_SIZE", "LOCAL_RANK", "RANK", PINNED_APART_ENV):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "c.toml").write_text("")
    cores = sorted(os.sched_getaffinity(0))
    pinned = _train(tmp_path, capfd, "pinned", "--set", "parallel.pin_ranks=true")  # pinned whatever else runs here
    assert pinned["rank_pinning"] == {"setting": True, "pinned": True,
                                      "cores_by_local_rank": [[cores[0]], [cores[1]]],
                                      "reason": "2 local ranks x 1 core(s) each, apart"}
    assert pinned["data_loader"]["prefetch"] == 0  # the probe counted this rank's one core: no thread beside it
    auto = _train(tmp_path, capfd, "auto")  # the default: pinned, unless other processes kept the cores busy
    assert auto["rank_pinning"]["setting"] == "auto"
    if auto["rank_pinning"]["pinned"]:
        assert auto["rank_pinning"] == {**pinned["rank_pinning"], "setting": "auto"}
        plain = _train(tmp_path, capfd, "plain", "--set", "parallel.pin_ranks=false")
        assert plain["rank_pinning"]["setting"] is False
    else:
        assert "busy at launch" in auto["rank_pinning"]["reason"]
        plain = auto
    assert plain["rank_pinning"]["pinned"] is False and plain["rank_pinning"]["cores_by_local_rank"] is None
    assert pinned["params_sha256"] == plain["params_sha256"]
