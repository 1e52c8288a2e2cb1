"""A large grid: said at once, built without re-running every key's own check, and equal to what the slow way
built (copy, config hash, packing class). `stride sweep` on a 100,000-point grid printed nothing for 41-52 s."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import pytest

from stride.config import config_hash, config_to_dict, load_config
from stride.config.errors import ConfigError
from stride.config.loader import config_view
from stride.sweep.grid import LARGE_GRID, copy_config, expand
from stride.sweep.packing import IGNORED_SECTIONS, PACK_METRICS, PER_MODEL_KEYS, pack_key

CFG = str(Path(__file__).resolve().parents[2] / "configs" / "quickstart.toml")
# a config with every kind of value a section holds: lists, tables, None, floats, strings, bools
RICH = ["model.loss=quantile", "model.quantiles=[0.2, 0.5, 0.8]", "optim.betas=[0.8, 0.9]",
        "train.target_val_loss=1.25", "checkpoint.enabled=true", "data.columns=[]"]


class Stop(BaseException):
    """Ends a sweep where the test looks: not an Exception, which a sweep now records as its class's failure (a model
    that raises while probed fails its points only, tests/sweep/test_sweep_failed_pack.py)."""


def test_a_large_grid_is_announced_before_any_point_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    import stride.sweep.grid as grid

    built: list[int] = []
    monkeypatch.setattr(grid, "copy_config", lambda cfg: built.append(1) or copy_config(cfg))
    said: list[str] = []

    def log(msg: str) -> None:
        said.append(msg)
        raise Stop  # the line came before the work: no point may have been built yet

    with pytest.raises(Stop):
        expand(CFG, [], [f"train.seed=0..{LARGE_GRID - 1}", "optim.lr=1e-3,2e-3"], log=log)
    assert said == [f"building the grid train.seed=0..{LARGE_GRID - 1} optim.lr=1e-3,2e-3: {2 * LARGE_GRID:,} "
                    f"points ({LARGE_GRID} x 2) ..."]
    assert built == []
    quiet: list[str] = []
    assert len(expand(CFG, [], ["train.seed=0..9"], log=quiet.append)[2]) == 10 and quiet == []  # small: no line


def test_a_point_does_not_run_every_keys_own_check_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """check_fields was 3/4 of building a point (~190 us); the base passed it in load_config, each grid value in
    set_key. The relations between keys still run on every point."""
    import stride.config.validate as validate

    calls = []
    real = validate.check_fields
    monkeypatch.setattr(validate, "check_fields", lambda cfg: calls.append(1) or real(cfg))
    points = expand(CFG, [], ["train.seed=0..49"])[2]
    assert len(points) == 50 and len(calls) == 2  # load_config's: the base's and the axis check's, not 50 more
    with pytest.raises(ConfigError, match=r"--grid point train.batch_size=30: `train.batch_size` = 30 is not "
                                          r"divisible by `train.grad_accum` = 4"):
        expand(CFG, ["train.grad_accum=4"], ["train.batch_size=64,30"])
    with pytest.raises(ConfigError, match=r"--grid train.batch_size=64,0: `train.batch_size` = 0"):
        expand(CFG, [], ["train.batch_size=64,0"])  # a value's own check: set_key's


@pytest.mark.parametrize("overrides", [[], RICH], ids=["quickstart", "lists-tables-none"])
def test_the_fast_copy_dict_and_hash_equal_the_slow_ones(overrides: list[str]) -> None:
    cfg = load_config(CFG, overrides)
    cfg.data.kwargs = {"a": 1, "b": [1, {"c": [2.5, None]}]}  # a table of tables (only a module:factory takes one)
    c = copy_config(cfg)
    assert c == copy.deepcopy(cfg) and c is not cfg
    assert all(getattr(c, s) is not getattr(cfg, s) for s in config_to_dict(cfg))
    c.optim.betas.append(0.99)
    c.data.kwargs["b"][1]["c"].append(3)
    c.train.seed += 1
    assert c.optim.betas != cfg.optim.betas and c.data.kwargs != cfg.data.kwargs and c.train.seed != cfg.train.seed
    assert config_view(cfg) == config_to_dict(cfg)
    assert config_hash(cfg) == _asdict_hash(cfg) and config_hash(c) == _asdict_hash(c) != _asdict_hash(cfg)


def _asdict_hash(cfg) -> str:
    """config_hash as it was before it read config_view: the same string, from dataclasses.asdict's copy."""
    return hashlib.sha256(json.dumps(config_to_dict(cfg), sort_keys=True).encode()).hexdigest()[:16]


def _old_pack_key(cfg) -> str:
    flat = {f"{s}.{k}": v for s, sec in config_to_dict(cfg).items() for k, v in sec.items()}
    shared = {k: v for k, v in flat.items() if k not in PER_MODEL_KEYS
              and (k.split(".")[0] not in IGNORED_SECTIONS or k in PACK_METRICS)}  # log_every, skip_steps: audit 10
    if cfg.model.loss == "quantile":
        shared["model.quantiles#count"] = len(cfg.model.quantiles)
    return json.dumps(shared, sort_keys=True, default=str)


def test_pack_key_is_what_it_was() -> None:
    grid = ["model.d_model=32,64", "optim.lr=1e-3,2e-3", "model.quantiles=[0.1, 0.9],[0.3, 0.7]"]
    # the grid sets model.quantiles at every point: a --set of it beside the grid is refused (stride.sweep.grid)
    points = expand(CFG, [o for o in RICH if not o.startswith("model.quantiles=")], grid)[2]
    assert [pack_key(p.config) for p in points] == [_old_pack_key(p.config) for p in points]
    assert len({pack_key(p.config) for p in points}) == 2  # d_model splits; lr and the levels (count 2) do not


def test_the_probe_is_announced_before_it_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import stride.sweep.runner as runner
    from stride.sweep.store import SweepStore

    said: list[str] = []
    monkeypatch.setattr(runner, "probe", lambda *a, **k: (_ for _ in ()).throw(Stop(list(said))))
    points = expand(CFG, [], ["train.seed=0..2"])[2]
    with pytest.raises(Stop) as e:
        runner.plan_jobs(points, SweepStore(tmp_path), runner.Options(pack="auto", probe_s=7, log=said.append))
    assert e.value.args[0] == ["3 point(s) of `ts_transformer`: probing pack sizes (up to about 7 s, --probe-s; "
                               "--pack N skips the probe)"]
