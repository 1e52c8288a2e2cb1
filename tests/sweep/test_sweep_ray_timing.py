"""On Ray, a pack's wall time is its task's own, and `--ray-address` is checked before anything is measured
(audit 10, F10).

Before: the driver timed each pack from its submission, so a pack queued behind others had its wait counted as
device time (13.2 s against 0.4 s locally on a 6-point sweep); and a malformed or unreachable address was
reported only after the solo-rate measurement, and under `--pack auto` after the whole probe (up to 60 s).
A fake `ray` module stands in for the cluster here: its `wait` holds each pack in the "queue" for QUEUE_S.
"""

from __future__ import annotations

import json
import sys
import time
import types

import pytest

import stride.launch.ray_train
import stride.sweep.runner
from stride.cli.main import main

QUEUE_S = 2.0


class _Ref:
    def __init__(self, fn, job) -> None:
        self.fn, self.job = fn, job


def _fake_ray(measured: list[float]) -> types.ModuleType:
    ray = types.ModuleType("ray")

    def remote(num_cpus):
        return lambda fn: types.SimpleNamespace(remote=lambda job: _Ref(fn, job))

    def wait(refs, num_returns=1, timeout=None):
        time.sleep(QUEUE_S)  # the pack waits for a free CPU
        return [refs[0]], refs[1:]

    def get(ref):
        out = ref.fn(ref.job)  # the task runs when its turn comes
        measured.append(out["wall_s"] if isinstance(out, dict) else None)
        return out

    ray.remote, ray.wait, ray.get = remote, wait, get
    ray.is_initialized = lambda: True
    ray.cancel = lambda ref, force=False: None
    return ray


def test_a_pack_s_wall_time_on_ray_leaves_out_its_wait_in_the_queue(config, tmp_path, monkeypatch) -> None:
    measured: list[float] = []
    monkeypatch.setitem(sys.modules, "ray", _fake_ray(measured))
    monkeypatch.setattr(stride.launch.ray_train, "init_ray", lambda ray, address: False)
    out = tmp_path / "s"
    assert main(["sweep", str(config), "--grid", "train.seed=0,1", "--pack", "2", "--backend", "ray",
                 "--out", str(out)]) == 0
    (pack,) = [json.loads(line) for line in (out / "packs.jsonl").read_text().splitlines()]
    assert pack["backend"] == "ray" and pack["error"] is None
    assert measured and pack["wall_s"] == measured[0] < QUEUE_S  # was QUEUE_S + the pack's own time


@pytest.mark.parametrize("pack", ["auto", "2"])
def test_a_malformed_ray_address_is_refused_before_the_solo_run_and_the_probe(config, tmp_path, monkeypatch, capsys,
                                                                              pack) -> None:
    pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[ray]')")

    def measured(*args, **kwargs):
        raise AssertionError("the sweep measured before it checked --ray-address")

    monkeypatch.setattr(stride.sweep.runner, "probe", measured)
    monkeypatch.setattr(stride.sweep.runner, "measure_solo", measured)
    rc = main(["sweep", str(config), "--grid", "train.seed=0,1", "--pack", pack, "--backend", "ray",
               "--ray-address", "garbage", "--out", str(tmp_path / "s")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and err[-1] == ("stride sweep: --ray-address 'garbage': expected host:port, ray://host:port or "
                                   "auto"), err


def test_sigterm_on_ray_stops_with_the_stop_line(config, tmp_path, monkeypatch, capfd) -> None:
    """`ray.init` sets its own SIGTERM handler (`sys.exit`), which ended a Ray sweep without the stop line; the
    sweep takes SIGTERM back after it. Here the first pack's task receives SIGTERM while it runs: its points are
    kept, the second pack is not started."""
    import os
    import signal

    def not_taken(signum, frame):
        raise AssertionError("SIGTERM reached a handler other than the sweep's")

    measured: list[float] = []
    ray = _fake_ray(measured)
    get = ray.get

    def term_then_get(ref):
        os.kill(os.getpid(), signal.SIGTERM)
        return get(ref)

    def init_like_ray(ray, address):
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))  # what ray.init does
        return False

    ray.get = term_then_get
    monkeypatch.setattr(sys.modules[__name__], "QUEUE_S", 0.0)
    monkeypatch.setitem(sys.modules, "ray", ray)
    monkeypatch.setattr(stride.launch.ray_train, "init_ray", init_like_ray)
    previous = signal.signal(signal.SIGTERM, not_taken)
    out = tmp_path / "s"
    try:
        rc = main(["sweep", str(config), "--grid", "train.seed=0..3", "--pack", "2", "--backend", "ray",
                   "--out", str(out)])
    finally:
        signal.signal(signal.SIGTERM, previous)
    err = capfd.readouterr().err.strip().splitlines()
    assert rc == 130, err
    assert err[-1] == (f"stride sweep: stopped (SIGTERM): 2 of 4 points finished and are kept in {out}; run the same "
                       "command again to resume it")
    assert len(measured) == 1 and (out / "report.html").is_file()
