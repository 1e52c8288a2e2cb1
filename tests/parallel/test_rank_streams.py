"""Each rank draws its own dropout masks once the weights are drawn (outside audit 11: every rank had one stream,
so data-parallel slices and TP head shards repeated each other's masks); rank 0 keeps the one-process stream. And
the closing summary's figures say whose they are (the job's, one rank's, the fullest rank's)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

from stride.train.device import seed_rank_stream

WORKER = Path(__file__).with_name("rank_stream_worker.py")


def test_rank_streams_differ_and_rank_0_keeps_the_seed() -> None:
    draws = []
    for rank in (0, 1, 2):
        torch.manual_seed(7)
        seed_rank_stream(7, rank)
        draws.append(torch.rand(8))
    torch.manual_seed(7)
    assert torch.equal(draws[0], torch.rand(8))
    assert not torch.equal(draws[0], draws[1]) and not torch.equal(draws[1], draws[2])


LAYOUTS = ["ddp", "fsdp", "tp"]
# set up under torchrun by rank_stream_worker.py, in the launches this package's modules share (conftest.py): one
# 2-rank launch for the three layouts, where each had a launch of its own
TORCHRUN_PART, TORCHRUN_RUNS = "rank_streams", {2: LAYOUTS}


def _two_ranks(torchrun_runs, layout: str) -> tuple[dict, dict]:
    runs = torchrun_runs.folder(TORCHRUN_PART)
    r0, r1 = (json.loads((runs / f"{layout}.rank{r}.json").read_text()) for r in (0, 1))
    return r0, r1


def _one_process() -> dict:
    sys.path.insert(0, str(WORKER.parent))
    try:
        from rank_stream_worker import after_setup
    finally:
        sys.path.pop(0)
    assert not any(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"))
    return after_setup("one")


@pytest.fixture(scope="module")
def one_process() -> dict:
    return _one_process()


@pytest.mark.dist
@pytest.mark.parametrize("layout", LAYOUTS)
def test_two_ranks_share_the_weights_not_the_dropout_masks(torchrun_runs, layout: str, one_process: dict) -> None:
    r0, r1 = _two_ranks(torchrun_runs, layout)
    if layout == "ddp":  # replicas of one model (FSDP and TP shards hold different slices, hashed apart)
        assert r0["weights"] == r1["weights"] == one_process["weights"]
    assert r0["masks"] != r1["masks"]
    if layout == "ddp":  # rank 0 draws what one process draws after the same set-up
        assert r0["masks"] == one_process["masks"]
    # the summary's peak memory: the largest over ranks and the rank that holds it (ties: the lowest), None skipped
    assert r0["max"] == r1["max"] == [[1500, 1], [5, 1], [7, 0]]
    # validation: each replica its slice of every batch (TP: both ranks the whole), summed over ranks: the
    # one-process mean, ragged last batch included
    assert one_process["val_sizes"][-1] < one_process["val_sizes"][0]
    assert r0["val"] == r1["val"] == pytest.approx(one_process["val"], rel=1e-6)


def test_a_replica_evaluates_its_slice_and_a_batch_smaller_than_the_replicas_is_counted_once() -> None:
    from types import SimpleNamespace

    from stride.parallel.context import Parallel

    def par(rank: int, dp: int) -> Parallel:
        return Parallel(None, SimpleNamespace(dp=dp), SimpleNamespace(dp_rank=rank), torch.device("cpu"))

    assert [par(r, 3).val_slice(10) for r in range(3)] == [(0, 3, True), (3, 6, True), (6, 10, True)]
    assert [par(r, 4).val_slice(3) for r in range(4)] == [(0, 3, True), (0, 3, False), (0, 3, False), (0, 3, False)]


def test_the_summary_table_labels_whose_figures_they_are() -> None:
    from rich.console import Console

    from stride.report.summary_table import print_summary

    s = {"name": "r", "steps": 3, "final_train_loss": 1.0, "final_val_loss": 1.0, "samples_per_s": 65.0,
         "timesteps_per_s": 4160.0, "step_time_s": 0.1, "achieved_flops_per_s": 3.3e8, "mfu": 0.0015,
         "peak_flops_per_s": 2e11, "peak_flops_source": "probe", "peak_mem_kind": "process_peak_rss",
         "peak_mem_bytes": 2**29, "step_time_breakdown_s": {}, "world_size": 4, "parallel": "fsdp+tp",
         "peak_mem_rank": 3}

    def shown(summary: dict) -> str:
        con = Console(record=True, width=200)
        print_summary(summary, con)
        return con.export_text()

    many = shown(s)
    assert "(4 ranks, fsdp+tp)" in many and "samples/s (all ranks)" in many and "MFU (per rank)" in many
    assert "achieved FLOP/s (per rank)" in many and "max over 4 ranks: rank 3" in many
    assert "saved activations (rank 0)" in shown({**s, "saved_activation_bytes": 2**20})
    one = shown({**s, "world_size": 1, "parallel": "none", "peak_mem_rank": 0})
    assert "ranks" not in one and "per rank" not in one


def test_compare_refuses_another_process_count_without_inviting_it() -> None:
    """`stride compare` of a 1-rank and a 2-rank run is refused (the process count is part of the workload); its reason
    listed "parallel layout" among what may differ: what the user had changed (outside audit of the layouts)."""
    from stride.report.compare import _row

    one, two = ({"throughput": {"median": 70.0}, "world_size": n} for n in (1, 2))
    why = _row(one, two, "audit")["workload_mismatch"]
    assert "world_size 1 vs 2" in why and "parallel layout at one process count" in why, why


def test_the_report_row_of_a_multi_process_run_says_whose_figures() -> None:
    """`stride report` of a 2-rank run showed its job's samples/s, one rank's MFU and the fullest rank's memory in a
    row that read as a one-process run's (outside audit of the layouts)."""
    from stride.report.render import _rows

    entry = {"name": "audit", "source": "stride train", "throughput": {"median": 319.0, "unit": "samples/s"},
             "mfu": 0.022, "peak_mem_bytes": 2**29, "final_val_loss": 2.2}
    two = _rows({"workloads": [{**entry, "world_size": 2}]})[0][0]
    assert two == "audit (2 ranks: throughput of all, MFU per rank, memory of the fullest)", two
    assert _rows({"workloads": [{**entry, "world_size": 1}]})[0][0] == "audit"
