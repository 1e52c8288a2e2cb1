"""A config whose splits cannot serve the run is refused naming the split that is empty or too small and what
would make it fit; a run that never validates is not refused for an empty validation split.

The first-contact report: `data.n_steps=300`, `train.batch_size=8`, `train.val_every=0` on the quick start was
refused with "leave too few windows for batch size 8; raise data.n_steps" although training had 195 window ends per
asset x 8 assets: what was empty was the validation split after the embargo (first end 298, last 279)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import stride
from stride.config.errors import ConfigError
from stride.data import build
from stride.data.build import build_data, build_synthetic

sys.path.insert(0, str(Path(__file__).parent))
from data_fixtures import write_parquet_dataset  # noqa: E402

from stride.data.ingest import ingest  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _cfg(*over: str):  # noqa: ANN202
    return stride.load_config(str(ROOT / "configs" / "quickstart.toml"), list(over)).data


def test_the_reported_case_names_the_empty_validation_split_and_what_fits() -> None:
    cfg = _cfg("data.n_steps=300")
    with pytest.raises(ConfigError) as err:
        build_synthetic(cfg, 8)
    msg = str(err.value)
    assert msg.startswith("[data]: the validation split is empty")
    assert "195 training window ends per asset x 8 assets" in msg
    assert "step 298" in msg and "step 279" in msg
    assert "raise data.n_steps to at least 484" in msg
    assert "set data.embargo to 1 or less" in msg and "raise data.val_fraction" in msg
    assert "even with train.val_every = 0" in msg  # the caller did not say whether the run validates
    assert "too few windows for batch size" not in msg
    # each fix it names does fit
    for fix in ("data.n_steps=484", "data.embargo=1"):
        assert build.synthetic_split_problem(_cfg("data.n_steps=300", fix), 8) is None
    assert build.synthetic_split_problem(_cfg("data.n_steps=483"), 8) is not None  # and 484 is the least


def test_a_run_that_never_validates_is_not_refused_for_an_empty_validation_split() -> None:
    cfg = _cfg("data.n_steps=300")
    b = build_data(cfg, 8, validation=False)
    assert b.val is None
    x, y = next(iter(b.train))
    assert tuple(x.shape) == (8, 64, b.n_features) and tuple(y.shape) == (8, 3)
    # told the run validates: refused, without the note for a caller that did not say
    with pytest.raises(ConfigError, match="the validation split is empty") as err:
        build_data(cfg, 8, validation=True)
    assert "val_every" not in str(err.value)
    # a validation split that is not empty is built whether or not the run validates
    assert build_data(_cfg("data.n_steps=600"), 8, validation=False).val is not None


def test_the_test_split_is_still_required_without_validation() -> None:
    cfg = _cfg("data.n_steps=300", "data.test_fraction=0.01")
    with pytest.raises(ConfigError, match=r"the test split is empty: .*raise data.n_steps to at least \d+"):
        build_data(cfg, 8, validation=False)


def test_training_split_is_counted_over_all_assets() -> None:
    # 15 window ends per asset: 4 assets hold 60 windows, enough for a batch of 32 (the loader counts them all; the
    # check compared one asset's 15 with the batch)
    cfg = _cfg("data.n_steps=100", "data.n_assets=4")
    assert len(build_synthetic(cfg, 32, validation=False).train.source) == 60
    with pytest.raises(ConfigError, match=r"the training split is too small: .* 15 window ends per asset x 4 assets "
                                          r"= 60 windows, fewer than batch size 64; raise data.n_steps to at least"):
        build_synthetic(cfg, 64, validation=False)
    with pytest.raises(ConfigError, match=r"the training split is too small: .* leave no training window .* 84 "
                                          r"steps.*lower data.seq_len"):
        build_synthetic(_cfg("data.n_steps=80"), 8)


def test_a_store_whose_validation_split_is_empty_says_what_to_change(tmp_path: Path) -> None:
    write_parquet_dataset(tmp_path / "src")  # 2 symbols x 2 days x 50 minutes
    st = ingest(tmp_path / "src", tmp_path / "st")
    cfg = stride.load_config(overrides=['data.source="store"', f'data.store="{st}"', "data.seq_len=8",
                                        "data.horizons=[5]", "data.val_fraction=0.01"]).data
    with pytest.raises(ConfigError, match=r"the val split of .* is empty .*raise data.val_fraction.*"
                                          r"even with train.val_every = 0"):
        build_data(cfg, 8)
    b = build_data(cfg, 8, validation=False)
    assert b.val is None and len(b.train.source) >= 8


def test_a_run_that_never_validates_trains_without_validation_windows(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture) -> None:
    """Through the CLI, as the report ran it: with train.val_every = 0 the trainer asks for no validation split; with
    val_every > 0 the same data is refused naming the empty validation split and the n_steps that would fit."""
    from stride.cli.main import main

    args = ["train", str(ROOT / "configs" / "quickstart.toml"), "--no-progress", "--set", "data.n_steps=300",
            "--set", "train.batch_size=8", "--set", "train.steps=4"]
    assert main([*args, "--set", "train.val_every=0", "--out", str(tmp_path / "a")]) == 0
    assert (tmp_path / "a" / "summary.json").is_file()
    capsys.readouterr()
    assert main([*args, "--set", "train.val_every=2", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "the validation split is empty" in err and "data.n_steps to at least 484" in err
