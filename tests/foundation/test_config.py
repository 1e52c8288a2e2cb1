"""Config errors name the key, what was expected, and a close match; nothing is eval'ed."""

from __future__ import annotations

import pytest

from stride.cli.main import main
from stride.config import ConfigError, config_hash, config_to_toml, load_config


def test_defaults_and_overrides_typed() -> None:
    cfg = load_config(overrides=["optim.lr=3e-4", "train.precision=bf16", "data.horizons=[1, 2]",
                                 "train.grad_clip=none", "train.deterministic=true", "model.d_model=32"])
    assert cfg.optim.lr == pytest.approx(3e-4) and isinstance(cfg.optim.lr, float)
    assert cfg.train.precision == "bf16" and cfg.data.horizons == [1, 2]
    assert cfg.train.grad_clip is None and cfg.train.deterministic is True and cfg.model.d_model == 32


def test_int_accepted_for_float() -> None:
    assert load_config(overrides=["optim.lr=1"]).optim.lr == 1.0


@pytest.mark.parametrize(
    ("override", "fragments"),
    [
        (["optim.lrr=1e-3"], ["optim.lrr", "did you mean `optim.lr`"]),
        (["optimm.lr=1e-3"], ["optimm", "did you mean `optim`"]),
        (["optim.lr=fast"], ["optim.lr", "expects a number", "'fast'"]),
        (["train.steps=1.5"], ["train.steps", "expects an integer"]),
        (["train.steps=99999999999999999999999"], ["train.steps", "outside the 64-bit integers"]),  # audit 7
        (["train.deterministic=1"], ["train.deterministic", "true or false"]),
        (["optim.lr=-1e-3"], ["optim.lr", "must be > 0"]),
        (["train.batch_size=10", "train.grad_accum=3"], ["batch_size", "not divisible", "grad_accum"]),
        (["train.precision=bf61"], ["train.precision", "fp32, bf16, fp16", "did you mean `bf16`"]),
        (["data.horizons=[]"], ["data.horizons"]),
        (["lr=1"], ["section.key"]),
        (["optim.lr"], ["key=value"]),
    ],
)
def test_config_errors_are_clear(override: list[str], fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(overrides=override)
    for frag in fragments:
        assert frag in str(info.value)


def test_toml_file_errors(tmp_path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[optim]\nlrr = 0.1\n")
    with pytest.raises(ConfigError, match=r"bad\.toml: unknown key `optim\.lrr` \(did you mean `optim\.lr`\?\)"):
        load_config(bad)
    bad.write_text("[optim\nlr = 0.1\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.toml")


def test_override_value_is_never_evaluated() -> None:
    # A Python expression is a plain string to the loader, so it fails the type check.
    with pytest.raises(ConfigError, match="expects a number"):
        load_config(overrides=["optim.lr=__import__('os').getcwd()"])


def test_resolved_config_round_trips(tmp_path) -> None:
    # kwargs belong to a module:factory model (the module is imported when the model is built, not here)
    cfg = load_config(overrides=["optim.lr=2e-4", "model.name=my_models:build", "model.kwargs={a = 1}",
                                 "train.name=x y"])
    path = tmp_path / "c.toml"
    path.write_text(config_to_toml(cfg))
    assert load_config(path) == cfg
    assert config_hash(load_config(path)) == config_hash(cfg)  # 0 vs 0.0 compare equal but hash apart


@pytest.mark.parametrize(("override", "words"), [
    ("model.kwargs={hidden = 16}", ["`model.kwargs` = {'hidden': 16}", "'ts_transformer'", "[model] keys"]),
    ("model.kwargs={d_modl = 16}", ["`model.kwargs`", "did you mean `model.d_model`"]),
    ("data.kwargs={seq_len = 16}", ["`data.kwargs`", "'synthetic'", "set `data.seq_len` instead"]),
])
def test_kwargs_for_a_built_in_model_or_source_are_refused(capsys, override: str, words: list[str]) -> None:
    """Built-ins take no kwargs: they were ignored, and `stride train` exited 0 having trained something else."""
    assert main(["train", "configs/quickstart.toml", "--set", override]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("stride train: config error:"), err
    for w in words:
        assert w in err, (w, err)


def test_cli_reports_config_error(capsys) -> None:
    assert main(["train", "configs/quickstart.toml", "--set", "optim.lrr=1"]) == 2
    assert "did you mean `optim.lr`" in capsys.readouterr().err


def test_cli_help_lists_commands(capsys) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "train" in out and "bench" in out


@pytest.mark.parametrize(("override", "words"), [
    (["parallel.dp_shard=2", "optim.name=adamw8bit"], ["`parallel.dp_shard` = 2", "`parallel.dp_replicate` (DDP"]),
    (["parallel.tp=2", "optim.name=adafactor"], ["`parallel.tp` = 2"]),
    (["parallel.dp_shard=2", "parallel.tp=2", "optim.name=adafactor"], ["`parallel.dp_shard` = 2 and `parallel.tp`"]),
])
def test_optimizers_that_need_whole_parameters_are_refused_with_sharding(override: list[str], words: list[str]) -> None:
    """adamw8bit / adafactor refuse DTensors: each rank used to start and fail at set-up, suggesting a name that
    does not exist ('fused_adamw'). The config says so first, with names that exist and take DTensors."""
    from stride.config.schema import SHARDED_PARAM_OPTIMIZERS

    with pytest.raises(ConfigError) as info:
        load_config("configs/quickstart.toml", override)
    msg = str(info.value)
    name = override[-1].split("=")[1]
    assert f"`optim.name` = {name!r}" in msg and "fused_adamw" not in msg, msg
    assert "one of " + ", ".join(repr(n) for n in SHARDED_PARAM_OPTIMIZERS) in msg, msg
    for w in words:
        assert w in msg, (w, msg)


@pytest.mark.parametrize("override", [
    ["parallel.dp_shard=2", "optim.name=adamw"], ["parallel.tp=2", "optim.name=adamw_triton"],
    ["parallel.dp_shard=2", "optim.name=sgd"], ["parallel.dp_replicate=2", "optim.name=adamw8bit"],
    ["parallel.pp=2", "optim.name=adafactor"],
])
def test_optimizers_sharded_layouts_can_use_are_accepted(override: list[str]) -> None:
    load_config("configs/quickstart.toml", override)


def _unused(override: list[str], world_size: int) -> list[str]:
    from stride.parallel.layout import resolve_layout
    from stride.parallel.unused_keys import unused_parallel_keys

    cfg = load_config("configs/quickstart.toml", override)
    return unused_parallel_keys(cfg.parallel, resolve_layout(cfg.parallel, world_size))


def test_parallel_keys_without_effect_on_one_process_are_named() -> None:
    """mp_param_dtype and comm_hook on one process trained plain fp32 with no word: the notice names each key."""
    unused = _unused(["parallel.mp_param_dtype=bf16", "parallel.comm_hook=powersgd", "parallel.backend=gloo",
                      "parallel.sequence_parallel=false", "parallel.pp_schedule=gpipe"], 1)
    assert [u.split(" acts on ")[0] for u in unused] == [
        '`parallel.mp_param_dtype` = "bf16"', '`parallel.comm_hook` = "powersgd"',
        "`parallel.sequence_parallel` = false", '`parallel.pp_schedule` = "gpipe"', '`parallel.backend` = "gloo"']
    assert "FSDP2's sharded parameters" in unused[0] and "DDP's gradient all-reduce" in unused[1]


@pytest.mark.parametrize(("override", "world_size", "expected"), [
    ([], 1, []),  # defaults: nothing to say
    (["parallel.mp_param_dtype=bf16", "parallel.dp_shard=2"], 2, []),  # FSDP uses it
    (["parallel.comm_hook=bf16", "parallel.ddp_bucket_mb=5"], 2, []),  # DDP over 2 (degrees 1) uses them
    (["parallel.mp_param_dtype=bf16"], 2, ["mp_param_dtype"]),  # ... but not FSDP's key
    (["parallel.dp_shard=2", "parallel.static_graph=true"], 2, ["static_graph"]),
    (["parallel.comm_hook=fp16", "parallel.powersgd_rank=4"], 2, ["powersgd_rank"]),  # not the PowerSGD hook
    (["parallel.collective_timeout_s=60"], 1, ["collective_timeout_s"]),
    (["parallel.comm_timing=true"], 2, []),  # the default: nothing to say
    (["parallel.comm_timing=false"], 2, []),  # DDP over 2 would time its all-reduce: switching it off acts
    (["parallel.comm_timing=false", "parallel.pp=2", "parallel.dp_replicate=2"], 4, ["comm_timing"]),  # a pipeline
])
def test_parallel_keys_without_effect_depend_on_the_layout(override: list[str], world_size: int,
                                                           expected: list[str]) -> None:
    assert [u.split("`")[1].removeprefix("parallel.") for u in _unused(override, world_size)] == expected
