"""`--grid` axes: values, ranges, lists; every bad input is one line naming the argument; packing classes."""

from __future__ import annotations

from pathlib import Path

import pytest

from stride.config.errors import ConfigError
from stride.sweep.grid import expand, parse_axis
from stride.sweep.packing import group, pack_key, split_keys

CFG = str(Path(__file__).resolve().parents[2] / "configs" / "quickstart.toml")


def test_values_ranges_and_lists():
    assert parse_axis("optim.lr=1e-4,3e-4,1e-3").values == [1e-4, 3e-4, 1e-3]
    assert parse_axis("train.seed=0..7").values == list(range(8))
    assert parse_axis("optim.betas=[0.9, 0.95],[0.9,0.99]").values == [[0.9, 0.95], [0.9, 0.99]]
    assert parse_axis('model.loss="mse",huber').values == ["mse", "huber"]


def test_expand_is_the_product_in_axis_order_with_stable_ids():
    _, axes, points = expand(CFG, ["train.steps=10"], ["optim.lr=1e-3,3e-3", "train.seed=0..2"])
    assert [p.values for p in points][:2] == [{"optim.lr": 1e-3, "train.seed": 0}, {"optim.lr": 1e-3, "train.seed": 1}]
    assert len(points) == 6 and len({p.id for p in points}) == 6
    assert points[4].config.optim.lr == 3e-3 and points[4].config.train.seed == 1 and points[4].config.train.steps == 10
    again = expand(CFG, ["train.steps=10"], ["optim.lr=1e-3,3e-3", "train.seed=0..2"])[2]
    assert [p.id for p in again] == [p.id for p in points]


@pytest.mark.parametrize("grid, message", [
    (["optim.lrr=1,2"], r"--grid optim.lrr=1,2: unknown key `optim.lrr` \(did you mean `optim.lr`\?\)"),
    (["optim.lr="], r"--grid optim.lr=: empty grid value list for `optim.lr`"),
    (["optim.lr=1e-3,,2e-3"], r"empty grid value list"),
    (["train.seed=5..2"], r"the range 5..2 is empty"),
    (["train.seed=0,x"], r"--grid train.seed=0,x: `train.seed` expects an integer, got str 'x'"),
    (["optim.lr=1e-3,-1"], r"--grid optim.lr=1e-3,-1: `optim.lr` = -1.0 must be > 0"),
    (["train.seed=1,2", "train.seed=3"], r"`train.seed` has two --grid axes"),
    (["train.seed=1,1"], r"a value appears twice"),
    ([], r"no --grid given"),
], ids=["unknown-key", "empty", "empty-item", "empty-range", "bad-type", "bad-value", "twice", "duplicate", "none"])
def test_bad_grids_are_one_line_errors(grid, message):
    with pytest.raises(ConfigError, match=message) as e:
        expand(CFG, [], grid)
    assert "\n" not in str(e.value)


def test_shape_changing_keys_split_packs_and_are_named():
    _, _, points = expand(CFG, [], ["model.d_model=32,64", "train.seed=0..2", "optim.lr=1e-3,2e-3"])
    cfgs = [p.config for p in points]
    packs = group(cfgs, 64)
    assert len(packs) == 2  # one per d_model; seeds and learning rates share
    for pk in packs:
        assert len({cfgs[i].model.d_model for i in pk.members}) == 1 and len(pk.members) == 6
    assert split_keys([cfgs[0], cfgs[-1]]) == ["model.d_model"]


def test_quantile_count_changes_the_head_so_it_splits():
    a = expand(CFG, ["model.loss=quantile"], ["model.quantiles=[0.1, 0.9],[0.2, 0.8],[0.1, 0.5, 0.9]"])[2]
    keys = [pack_key(p.config) for p in a]
    assert keys[0] == keys[1] != keys[2]  # levels are per model, their count is not


def test_pack_sizes_split_a_class():
    _, _, points = expand(CFG, [], ["train.seed=0..6"])
    assert [pk.members for pk in group([p.config for p in points], 3)] == [[0, 1, 2], [3, 4, 5], [6]]


@pytest.mark.parametrize("axis, same", [
    ("optim.lr=1,1.0", "1 and 1.0"),
    ("train.grad_clip=1,1.0", "1 and 1.0"),
    ("optim.lr=1e-3,0.001", "1e-3 and 0.001"),
    ("optim.betas=[0.9,0.95],[0.9, 0.95]", "[0.9,0.95] and [0.9, 0.95]"),
])
def test_one_value_written_two_ways_is_a_duplicate(axis, same):
    """Compared as the key holds them (audit 10, F8): `optim.lr=1,1.0` trained two points of one config, which the
    report named `optim.lr=1` and `optim.lr=1.0` and tested as a pair."""
    key = axis.split("=")[0]
    with pytest.raises(ConfigError) as e:
        expand(CFG, [], [axis, "train.seed=0,1"])
    assert str(e.value) == (f"--grid {axis}: a value appears twice in the grid of `{key}`: {same} are one value "
                            f"of `{key}`")


def test_values_keep_the_type_they_were_written_with():
    """Only the duplicate check applies the key's type: the point ids of existing sweeps hash the values as
    written (an int 1 for a float key), so those stay."""
    assert parse_axis("optim.lr=1,2").values == [1, 2] and type(parse_axis("optim.lr=1,2").values[0]) is int


def test_a_set_that_the_grid_overrides_is_refused_naming_the_key():
    """Audit: `--grid train.seed=0..2 --set train.seed=3` dropped the --set without a word."""
    with pytest.raises(ConfigError, match=r"--set train.seed=3 and --grid train.seed=0..2 both set `train.seed`"):
        expand(CFG, ["train.seed=3"], ["optim.lr=1e-3,3e-3", "train.seed=0..2"])
    expand(CFG, ["train.steps=10"], ["train.seed=0..2"])  # another key: fine
