"""adamw_triton under tensor parallelism updates replicated weights from their reduced gradient.

With sequence parallel (the default) a norm's weight is replicated and its gradient a `Partial(sum)`: FusedAdamW
took each rank's own term (`to_local`), so the replicas drifted apart (8.4e-4 after 5 steps at tp = 2; a review's
find). Now, as with torch's AdamW, every replica is equal and equals torch AdamW's.
"""

from __future__ import annotations

import pytest
import torch

# trained under torchrun by tp_optim_driver.py (2 gloo ranks, 5 steps with each optimizer in turn), in the launches
# this package's modules share (conftest.py): the processes' start-up, not the 5 steps, is what this test waits for
OPTIMIZERS = ["adamw", "adamw_triton"]
TORCHRUN_PART, TORCHRUN_RUNS = "tp_optim", {2: OPTIMIZERS}


@pytest.mark.dist
@pytest.mark.slow
def test_adamw_triton_keeps_replicated_weights_equal_under_tp(torchrun_runs) -> None:
    runs = torchrun_runs.folder(TORCHRUN_PART)
    ref, got = ([torch.load(runs / f"norm.{opt}.{rank}") for rank in range(2)] for opt in OPTIMIZERS)
    assert torch.equal(ref[0], ref[1])
    assert torch.equal(got[0], got[1])  # drifted apart before (each rank used its own partial gradient)
    assert torch.allclose(got[0], ref[0], rtol=0, atol=1e-6)
    assert not torch.equal(got[0], torch.ones_like(got[0]))  # it trained
