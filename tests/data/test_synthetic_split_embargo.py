"""The synthetic source splits as the store source and config.md say (audit 9, #1 and #2): `embargo` rows lie between
the last row a training target uses and the first validation window end, and `test_fraction` is held out after
validation. Checked on the loaders' own window ends, for the built-in source and the examples/mypkg template."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import stride
from stride.data.build import build_synthetic

ROOT = Path(__file__).resolve().parents[2]


def _cfg(*over: str):  # noqa: ANN202
    return stride.load_config(str(ROOT / "configs" / "quickstart.toml"), list(over)).data


def _ends(loader) -> torch.Tensor:  # noqa: ANN001
    src = loader.source
    return torch.as_tensor(src.ends)[:, 1]


@pytest.mark.parametrize("embargo", [-1, 0, 3, 25])
def test_embargo_rows_lie_between_the_last_training_target_and_the_first_validation_end(embargo: int) -> None:
    cfg = _cfg(f"data.embargo={embargo}")
    b = build_synthetic(cfg, 64)
    max_h = max(cfg.horizons)
    last_train_target_row = int(_ends(b.train).max()) + max_h
    first_val_end = int(_ends(b.val).min())
    # rows strictly between: first_val_end - last_train_target_row - 1 ... a validation window's targets start at
    # its end + 1, so none shares a row with a training target even at embargo 0
    assert first_val_end - last_train_target_row - 1 == (max_h if embargo < 0 else embargo)


def test_test_fraction_is_held_out_after_validation() -> None:
    base = build_synthetic(_cfg("data.val_fraction=0.1"), 64)
    held = build_synthetic(_cfg("data.val_fraction=0.1", "data.test_fraction=0.3"), 64)
    cfg = _cfg()
    n, max_h = cfg.n_steps, max(cfg.horizons)
    # without a test period validation runs to the last window with a full target; with one, its targets stop
    # well before the end (30% of the time is the test's), and training is shorter by the same share
    assert int(_ends(base.val).max()) + max_h == n - 1
    assert int(_ends(held.val).max()) + max_h < n - 1 - 0.25 * n
    assert int(_ends(held.train).max()) < int(_ends(base.train).max()) - 0.25 * n


def test_the_example_data_source_splits_the_same_way() -> None:
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from mypkg.data import build
    finally:
        sys.path.remove(str(ROOT / "examples"))
    cfg = _cfg("data.embargo=0")
    b = build(cfg, 64)
    max_h = max(cfg.horizons)
    last_train_target_row = int(b.train.ends[:, 1].max()) + max_h
    assert int(b.val.ends[:, 1].min()) - last_train_target_row - 1 == 0


def test_a_test_period_without_a_window_is_refused() -> None:
    from stride.config.errors import ConfigError

    with pytest.raises(ConfigError, match="holds no test window"):
        build_synthetic(_cfg("data.n_steps=1000", "data.test_fraction=0.01", "data.val_fraction=0.2"), 64)
