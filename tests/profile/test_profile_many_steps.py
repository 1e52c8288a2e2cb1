"""A trace of many profiler steps is analysed in time linear in its events: each step's figures read only that
step's events (outside audit of `stride analyze`: 30,000 steps of 1.7 M events, 235 MB, took 166 s wall on a
shared 2-core AMD EPYC, 7.4 s at 6,000 steps against 2.5 s now; the per-step tiny-kernel figures and the annotation
table each went over every event or step once per step)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from synth import host, kernel, launch, write  # noqa: E402

from stride.profile.activity import build_activity  # noqa: E402
from stride.profile.kernels import _in_windows  # noqa: E402
from stride.profile.trace_model import load_trace  # noqa: E402
from stride.profile.windows import Window, step_windows  # noqa: E402


class _Reads(np.ndarray):
    """An array that counts the elements read through indexing (what a step's figures cost)."""

    read = 0

    def __getitem__(self, key):  # noqa: ANN001, ANN204
        out = super().__getitem__(key)
        _Reads.read += int(np.size(out))
        return out


def _trace(tmp_path: Path, n_steps: int = 200) -> Path:
    ev, corr = [], 0
    for k in range(n_steps):
        s = 1000.0 * k
        ev.append(host(f"ProfilerStep#{k + 1}", s, 1000.0, cat="user_annotation"))
        for j in range(5):
            corr += 1
            ev += [launch(s + j, corr), kernel("ampere_sgemm_128x64_tn", s + 100.0 + 150.0 * j, 100.0, 7, corr)]
    ev.append(launch(50.0, corr + 1))  # one long kernel across steps 1-3 (every window must still see it)
    ev.append(kernel("void at::native::vectorized_elementwise_kernel<4>", 60.0, 2500.0, 8, corr + 1))
    return write(tmp_path / "steps.json", {"schemaVersion": 1, "traceEvents": ev})


def _indices(m: np.ndarray) -> np.ndarray:
    return np.flatnonzero(m) if m.dtype == bool else np.asarray(m)


def test_events_in_windows_match_the_definition(tmp_path: Path) -> None:
    act = build_activity(load_trace(_trace(tmp_path)))
    windows = step_windows(load_trace(tmp_path / "steps.json"), act)
    rng = np.random.default_rng(0)
    for pick in ([windows[0]], [windows[2]], windows[5:9], [windows[-1]], windows,
                 [Window(None, 150.0, 160.0)], [Window(None, -50.0, 0.0)]):
        want = np.flatnonzero([any(a < w.end and b > w.start for w in pick)
                               for a, b in zip(act.ev_ts, act.ev_end, strict=True)])
        assert np.array_equal(_indices(_in_windows(act, pick)), want)
    for _ in range(20):
        lo = float(rng.uniform(-100, 200_000))
        w = [Window(None, lo, lo + float(rng.uniform(0, 3000)))]
        want = np.flatnonzero((act.ev_ts < w[0].end) & (act.ev_end > w[0].start))
        assert np.array_equal(_indices(_in_windows(act, w)), want)


def test_one_steps_figures_read_only_its_events(tmp_path: Path) -> None:
    """Step 100 of 200: its 5 kernels (and the candidates the longest kernel's reach allows), not all 1,001."""
    act = build_activity(load_trace(_trace(tmp_path)))
    windows = step_windows(load_trace(tmp_path / "steps.json"), act)
    act.ev_end = act.ev_end.view(_Reads)
    act.ev_ts = act.ev_ts.view(_Reads)
    _Reads.read = 0
    got = _indices(_in_windows(act, [windows[99]]))
    assert len(got) == 5
    assert _Reads.read <= 40, _Reads.read  # before: 501, a mask over every event of the trace per step


def test_one_event_across_the_whole_trace_does_not_widen_every_steps_search(tmp_path: Path) -> None:
    """A collective's wait spanning all 200 steps: the search reached back by the longest event, so step 100 read
    half the trace's events again (review of session 36's diff); the longest events are checked apart now."""
    path = _trace(tmp_path)
    import json

    trace = json.loads(path.read_text())
    trace["traceEvents"] += [launch(40.0, 99_999), kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 45.0, 199_900.0, 9,
                                                           99_999)]
    path.write_text(json.dumps(trace))
    act = build_activity(load_trace(path))
    windows = [Window(None, 1000.0 * k, 1000.0 * (k + 1)) for k in range(200)]  # the host steps' spans
    for pick in ([windows[0]], [windows[99]], windows[5:9], windows):  # still the definition
        want = np.flatnonzero([any(a < w.end and b > w.start for w in pick)
                               for a, b in zip(act.ev_ts, act.ev_end, strict=True)])
        assert np.array_equal(_indices(_in_windows(act, pick)), want)
    act.ev_end = act.ev_end.view(_Reads)
    act.ev_ts = act.ev_ts.view(_Reads)
    _Reads.read = 0
    assert len(_indices(_in_windows(act, [windows[99]]))) == 6  # its 5 kernels and the all-reduce
    assert _Reads.read <= 40, _Reads.read  # with the all-reduce as the reach: ~500
