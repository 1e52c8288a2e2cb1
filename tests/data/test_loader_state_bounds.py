"""A loader state past its epoch is refused (audit 14, L10): a data position of 10**15 (an epoch of 912 batches)
resumed with exit 0 and no word; the checkpoint resume now skips such a checkpoint naming why
(tests/checkpoint/test_checkpoint_rng_state.py), and the loader itself takes no position outside its epoch."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from data_fixtures import Ids  # noqa: E402

from stride.data.loader import ShardedLoader  # noqa: E402


@pytest.mark.parametrize(("epoch", "position"), [(0, 10**15), (0, 11), (-1, 0), (0, -2)])
def test_a_position_outside_the_epoch_is_refused(epoch: int, position: int) -> None:
    ld = ShardedLoader(Ids(100), 10)  # 10 batches an epoch
    state = {**ld.state_dict(), "epoch": epoch, "position": position}
    with pytest.raises(ValueError, match=rf"epoch {epoch}, position {position} is outside this loader's epochs of 10 "
                                         "batches"):
        ld.load_state_dict(state)
    assert (ld.epoch, ld.position) == (0, 0)


def test_the_end_of_an_epoch_is_a_position_still() -> None:
    ld = ShardedLoader(Ids(100), 10)
    ld.load_state_dict({**ld.state_dict(), "epoch": 3, "position": 10})  # resumed_stream moves it to the next
    assert (ld.epoch, ld.position) == (3, 10)
