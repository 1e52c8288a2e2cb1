"""Another trainer's name for a key is answered with stride's (first-contact audit of 2026-12-07): `optim.learning_rate`
in a newcomer's config was answered "did you mean `optim.min_lr_ratio`?", the closest spelling, not the key meant."""

from __future__ import annotations

from pathlib import Path

import pytest

from stride.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]
CFG = ROOT / "configs" / "quickstart.toml"


@pytest.mark.parametrize(("written", "meant"), [
    ("optim.learning_rate", "optim.lr"),
    ("train.max_steps", "train.steps"),
    ("train.max_grad_norm", "train.grad_clip"),
    ("train.gradient_accumulation_steps", "train.grad_accum"),
    ("data.lookback", "data.seq_len"),
])
def test_another_trainers_key_name_points_at_strides(written: str, meant: str) -> None:
    with pytest.raises(ConfigError, match=f"unknown key `{written}` \\(did you mean `{meant}`\\?\\)"):
        load_config(CFG, [f"{written}=1"])


def test_a_file_key_gets_the_same_answer(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text("[optim]\nlearning_rate = 1e-3\n")
    with pytest.raises(ConfigError, match="did you mean `optim.lr`"):
        load_config(p)


def test_a_misspelling_still_gets_the_closest_key() -> None:
    with pytest.raises(ConfigError, match="did you mean `optim.lr`"):
        load_config(CFG, ["optim.lrr=1e-3"])
