"""Audit of `stride sweep` (#1, #2, #6): implausible or hand-edited point files, and statistics of extreme or
identical seeds.

#1: a point file with `summary.final_val_loss` -1e308 ended the report in an OverflowError traceback from
`statistics.variance`; a loss below 0 is now refused in one line naming the file and field (exit 2), and the
statistics never raise on extreme finite values (1e308: no figure, no test, said why).
#2: `summary.final_val_loss` edited to 0.5 (its history still ending at the real val loss) was accepted and
re-ranked the sweep; a summary that disagrees with its own history is refused, naming the file.
#6: `welch([1, 1], [2, 2])` gave t = -inf, p = 0 and a zero-width interval: certainty from seeds that gave one
value each; now no test, and the report says the seeds gave identical results.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sweep_fixtures import sweep_argv

from stride.cli.main import main
from stride.sweep.report import IDENTICAL, NO_FIGURE, configuration_stats, pairwise, significance_line
from stride.sweep.stats import diff_interval, mean_sd, no_seed_spread, welch


def points(out: Path) -> list[Path]:
    return sorted((out / "points").glob("*.json"))


def edit(path: Path, change) -> None:
    obj = json.loads(path.read_text())
    change(obj)
    path.write_text(json.dumps(obj))


def refused(config, out, capsys) -> str:
    assert main(sweep_argv(config, out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    return err[0]


def test_a_negative_loss_is_refused_naming_the_file_and_field(config, copy, capsys) -> None:
    path = points(copy)[0]
    edit(path, lambda o: o["summary"].update(final_val_loss=-1e308))
    line = refused(config, copy, capsys)
    assert str(path) in line and "summary.final_val_loss is -1e+308, below 0" in line


def test_a_final_val_loss_that_its_history_does_not_end_at_is_refused(config, copy, capsys) -> None:
    path = points(copy)[0]
    edit(path, lambda o: o["summary"].update(final_val_loss=0.5))
    line = refused(config, copy, capsys)
    assert str(path) in line and "summary.final_val_loss is 0.5, but its history's last val_loss" in line
    assert f"delete {path}" in line  # how to recompute the point


def test_a_train_loss_or_steps_that_disagree_with_the_history_are_refused(config, copy, capsys) -> None:
    path = points(copy)[0]
    edit(path, lambda o: o["summary"].update(steps=1))
    assert "summary.steps is 1, but its history goes to step" in refused(config, copy, capsys)
    edit(path, lambda o: o["summary"].update(steps=4, final_train_loss=0.01))
    assert "summary.final_train_loss is 0.01, but its history's loss at step 4" in refused(config, copy, capsys)


def test_extreme_but_consistent_losses_give_a_report_not_a_traceback(config, copy, capsys) -> None:
    def huge(o):
        o["summary"]["final_val_loss"] = 1e308
        for h in o["history"]:
            if "val_loss" in h:
                h["val_loss"] = 1e308

    for path in points(copy)[:3]:
        edit(path, huge)
    assert main(sweep_argv(config, copy)) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and NO_FIGURE in err
    pairs = json.loads((copy / "results.json").read_text())["sweep"]["pairs"]
    assert all(p["significant"] is None for p in pairs)


def test_statistics_never_raise_on_extreme_finite_values() -> None:
    for a, b in [([-1e308, 1.4, 1.5], [1.4, 1.45, 1.44]), ([1e308, 1e308], [1.0, 2.0]), ([1e308, -1e308], [1, 2])]:
        assert welch(a, b) is None and diff_interval(a, b) is None
    assert mean_sd([1e308, 1e308]) == (1e308, 0.0)
    assert mean_sd([1e308, 1.0, 1.0])[1] is None  # the variance is past the float range: no sd
    assert welch([1.0, 2.0, 3.0], [2.0, 3.0, 5.0]).p == pytest.approx(0.28462717876142, rel=1e-9)


def result(lr: float, seed: int, val: float) -> dict:
    return {"id": f"{lr}-{seed}", "label": "", "values": {"optim.lr": lr, "train.seed": seed},
            "summary": {"status": "done", "final_val_loss": val}}


def test_identical_seeds_on_both_sides_are_not_a_certain_difference() -> None:
    assert welch([1.0, 1.0], [2.0, 2.0]) is None and diff_interval([1.0, 1.0], [2.0, 2.0]) is None
    results = [result(lr, s, v) for lr, v in ((1e-3, 1.0), (2e-3, 2.0)) for s in (0, 1)]
    (pair,) = pairwise(results)
    assert pair["not_tested"] == IDENTICAL and pair["p"] is None and pair["significant"] is None
    assert pair["ci95"] is None and pair["p_holm"] is None
    line = significance_line([pair])
    assert "identical results" in line and "seed noise unknown" in line and "differ beyond" not in line
    assert [c["sd"] for c in configuration_stats(results)] == [0.0, 0.0]


def test_a_spread_that_underflows_is_no_spread_for_the_report_and_the_test_alike() -> None:
    """Review: the report's IDENTICAL (sd == 0 on both sides) and welch's None (var/n sums to 0) were two checks of
    one fact. 0, 0, 3e-162 has sd 2.2e-162 but a variance of 5e-324 that is 0 over 3 seeds: welch gave no test, the
    report said "too large for the test's figures". Both now ask stride.sweep.stats.no_seed_spread."""
    a, b = [0.0, 0.0, 3e-162], [1.0, 1.0, 1.0]
    assert mean_sd(a)[1] == pytest.approx(2.2227587494850775e-162) and no_seed_spread(a, b)
    results = [result(1e-3, s, v) for s, v in enumerate(a)] + [result(2e-3, s, v) for s, v in enumerate(b)]
    (pair,) = pairwise(results)
    assert pair["not_tested"] == IDENTICAL and pair["p"] is None and welch(a, b) is None
    # boundary values: where one says no spread, the other agrees; a measurable spread is tested
    for a, b, none in [([0.0, 0.0, 3e-162], [1.0, 1.0, 1.0], True), ([0.0, 1e-300], [1.0, 1.0], True),
                       ([0.0, 5e-324], [2.0, 2.0], True), ([0.0, 1e-50], [1.0, 1.0], False),
                       ([1.0, 1.0 + 2**-52], [1.0, 1.0], False), ([1.0, 1.0], [2.0, 3.0], False)]:
        results = [result(1e-3, s, v) for s, v in enumerate(a)] + [result(2e-3, s, v) for s, v in enumerate(b)]
        (pair,) = pairwise(results)
        assert no_seed_spread(a, b) is none and (welch(a, b) is None) is none, (a, b)
        assert (pair["not_tested"] == IDENTICAL) is none and (pair["p"] is None) is none, (a, b)


def test_one_side_without_spread_is_still_tested() -> None:
    results = [result(1e-3, s, 1.0) for s in (0, 1)] + [result(2e-3, s, v) for s, v in ((0, 2.0), (1, 3.0))]
    (pair,) = pairwise(results)
    assert pair["not_tested"] is None and pair["p"] is not None


def test_identical_packs_far_apart_label_the_speedup_unreliable() -> None:
    """Audit #3: identical packs took 0.37 s and 7.0 s and "0.09x" was printed without the UNRELIABLE label."""
    from stride.sweep.report_files import cost, unreliable_text

    results = [{"id": i, "one_by_one_s": 0.35, "summary": {"steps": 60}} for i in "abcd"]
    packs = [{"ids": ["a", "b"], "size": 2, "solo": False, "wall_s": 0.5, "time": 1.0, "train_s": 0.37},
             {"ids": ["c", "d"], "size": 2, "solo": False, "wall_s": 7.2, "time": 9.0, "train_s": 7.0}]
    c = cost(results, packs, None)
    assert c["speedup_unreliable"] is None and "2 packs of 2 took" in c["packs_unreliable"]
    assert unreliable_text(c).startswith("the packs' timings were of a contended host (2 packs of 2 took")
    steady = [{**packs[0]}, {**packs[1], "train_s": 0.4}]
    assert cost(results, steady, None)["packs_unreliable"] is None
    starved = [{**packs[0], "waiting_threads": 0.9}, {**packs[1], "train_s": 0.4, "waiting_threads": 0.0}]
    assert "1 pack(s) with up to 0.90 threads waiting" in cost(results, starved, None)["packs_unreliable"]


def test_each_pack_records_its_run_queue_wait(config, finished) -> None:
    from stride.sweep.runner import load_pack_log

    recs = load_pack_log(finished)
    assert recs and all("waiting_threads" in r for r in recs)
    assert all(r["waiting_threads"] is None or r["waiting_threads"] >= 0 for r in recs)
