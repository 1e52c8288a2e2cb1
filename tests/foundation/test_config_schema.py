"""The config schema is the one source of what each key accepts: its docs, choices, ranges and the
reference page all come from it, and every value outside it is a one-line error naming the key."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest

from stride.cli.main import main
from stride.config import ConfigError, RunConfig, load_config
from stride.config.fields import all_fields
from stride.config.reference import reference_markdown
from stride.config.schema import Kernels, OptimName, PipelineSchedule
from stride.config.validate import validate

ROOT = Path(__file__).resolve().parents[2]
FLOATS = [f.key for f in all_fields() if f.base is float]
LITERALS = [f for f in all_fields() if f.choices]


def test_every_field_has_a_docstring() -> None:
    missing = [f.key for f in all_fields() if len(f.doc) < 15]
    assert not missing, f"fields without a docstring under them in stride/config/schema.py: {missing}"


def test_docs_config_md_is_generated_from_the_schema() -> None:
    page = (ROOT / "docs" / "config.md").read_text()
    assert page == reference_markdown(), (
        "docs/config.md is stale: regenerate it with `stride config show --markdown > docs/config.md`")
    for f in all_fields():
        assert f"| `{f.name}` |" in page


def test_choices_tables_are_the_schemas() -> None:
    """The code that maps a choice to an implementation covers exactly the schema's choices."""
    from stride.kernels import KERNEL_CHOICES
    from stride.optim.factory import OPTIMIZERS
    from stride.parallel.pipeline_plan import SCHEDULES

    assert typing.get_args(Kernels) == KERNEL_CHOICES
    assert set(OPTIMIZERS) == set(typing.get_args(OptimName))
    assert set(SCHEDULES) == set(typing.get_args(PipelineSchedule))


@pytest.mark.parametrize("spec", LITERALS, ids=lambda f: f.key)
def test_a_value_outside_the_choices_names_key_value_choices_and_close_match(spec) -> None:
    choice = spec.choices[-1]
    typo = choice[:-1] + ("x" if choice[-1] != "x" else "y")
    with pytest.raises(ConfigError) as info:
        load_config(overrides=[f"{spec.key}={typo}"])
    msg = str(info.value)
    assert f"`{spec.key}` = {typo!r} is not one of {', '.join(spec.choices)}" in msg
    assert f"(did you mean `{choice}`?)" in msg
    assert "\n" not in msg


@pytest.mark.parametrize("key", FLOATS)
@pytest.mark.parametrize("bad", ["nan", "inf", "-inf"])
def test_no_float_key_takes_nan_or_inf(key: str, bad: str) -> None:
    with pytest.raises(ConfigError, match=rf"`{key}` = (nan|inf|-inf) is not a finite number"):
        load_config(overrides=[f"{key}={bad}"])


@pytest.mark.parametrize("override", ["optim.lr=inf", "train.grad_clip=nan", "optim.lr=nan", "optim.eps=nan",
                                      "optim.weight_decay=nan", "optim.betas=[0.9, nan]", "model.quantiles=[inf]"])
def test_the_reported_nan_and_inf_cases_are_config_errors(override: str, capsys) -> None:
    assert main(["train", "configs/quickstart.toml", "--set", override]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "is not a finite number" in err and override.split("=")[0] in err


def test_a_config_built_in_python_is_checked_against_the_schema_too() -> None:
    cfg = RunConfig()
    cfg.train.precision = "bf61"
    with pytest.raises(ConfigError, match=r"`train.precision` = 'bf61' is not one of fp32, bf16, fp16"):
        validate(cfg)
    cfg = RunConfig()
    cfg.optim.lr = float("nan")
    with pytest.raises(ConfigError, match=r"`optim.lr` = nan is not a finite number"):
        validate(cfg)


@pytest.mark.parametrize(("content", "fragment"), [
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "not a TOML config (not UTF-8 text: byte 0x89 at offset 0)"),
    (b"[train]\nsteps = 3\n\xc3\x28", "not a TOML config (not UTF-8 text"),
    (b"\x00\x01\x02binary", "not valid TOML"),
    (b"just some words\n", "not valid TOML"),
])
def test_a_config_file_that_is_not_toml_text_is_one_line_naming_it(tmp_path: Path, capsys, content: bytes,
                                                                   fragment: str) -> None:
    path = tmp_path / "run.toml"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=str(path).replace(".", r"\.")):
        load_config(path)
    assert main(["train", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(path) in err and fragment in err, err


@pytest.mark.parametrize(("name", "fragment"), [
    ("os:system", "`model.name` = 'os:system': the factory cannot be called as system(n_features=..., seq_len=..., "
                  "n_horizons=...)"),
    ("os:sep", "`model.name` = 'os:sep': 'os' has a str, not a callable, 'sep'"),
    ("os:nothing_here", "`model.name` = 'os:nothing_here': 'os' has no attribute 'nothing_here'"),
    ("collections:OrderedDict", "`model.name` = 'collections:OrderedDict' returned OrderedDict, not Module"),
    ("no_such_module_xyz:f", "cannot import module 'no_such_module_xyz'"),
])
def test_the_plugin_hook_gives_clean_errors(name: str, fragment: str, capsys) -> None:
    assert main(["train", "configs/quickstart.toml", "--set", f"model.name={name}", "--set", "train.steps=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and fragment in err, err


def test_a_data_factory_with_the_wrong_signature_is_a_config_error(capsys) -> None:
    assert main(["train", "configs/quickstart.toml", "--set", "data.source=os:getcwd"]) == 2
    err = capsys.readouterr().err.strip()
    assert "`data.source` = 'os:getcwd': the factory cannot be called as getcwd(cfg=..., batch_size=...)" in err


def test_config_show_lists_every_key_with_value_default_and_doc(capsys) -> None:
    assert main(["config", "show", "configs/quickstart.toml", "--set", "optim.lr=2e-3"]) == 0
    out = capsys.readouterr().out
    for f in all_fields():
        assert f.key in out
    row = next(line for line in out.splitlines() if "optim.lr " in line)
    assert "0.002" in row and "0.001" in row and "Peak learning rate" in row
    assert main(["config", "show", "--section", "train"]) == 0
    out = capsys.readouterr().out
    assert "train.precision" in out and "one of: fp32, bf16, fp16" in out and "optim.lr" not in out
    assert main(["config", "show", "--markdown"]) == 0
    assert capsys.readouterr().out == reference_markdown()
    assert main(["config", "show", "--section", "trian"]) == 2
    assert "did you mean `train`" in capsys.readouterr().err


@pytest.mark.parametrize("betas, ok", [("[0.9,0.5]", False), ("[0.9,0.81]", False), ("[0.9,0.82]", True),
                                       ("[0.0,0.0]", True), ("[0.9,0.95]", True)])
def test_adamw8bit_betas_it_would_refuse_are_a_config_error_before_a_run(betas: str, ok: bool) -> None:
    """AdamW8bit refuses beta1^2 >= beta2 when built (its stored update is unbounded there); the config says so first,
    so a run or a sweep point fails before it starts, and the other optimizers still take those betas."""
    config = Path(__file__).resolve().parents[2] / "configs" / "quickstart.toml"
    sets = ["optim.name=adamw8bit", f"optim.betas={betas}"]
    if ok:
        load_config(config, sets)
    else:
        shown = ", ".join(str(float(v)) for v in betas.strip("[]").split(","))
        with pytest.raises(ConfigError, match=re.escape(f"`optim.betas` = [{shown}] with `optim.name` = 'adamw8bit': "
                                                        "beta1^2 >= beta2")):
            load_config(config, sets)
    load_config(config, ["optim.name=adamw", f"optim.betas={betas}"])
