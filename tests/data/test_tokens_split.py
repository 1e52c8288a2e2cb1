"""The token source splits as the other sources (audit 9 review): test_fraction held out after validation, the embargo
skipped after the training span, and every validation window evaluated (32 of 48 were)."""

from __future__ import annotations

from pathlib import Path

import stride
from stride.data.tokens import return_tokens

ROOT = Path(__file__).resolve().parents[2]


def _cfg(*over: str):  # noqa: ANN202
    return stride.load_config(str(ROOT / "configs" / "quickstart.toml"), ["data.seq_len=32", *over]).data


def _rows(loader) -> int:  # noqa: ANN001
    return sum(len(x) for x, _ in loader)


def test_every_validation_window_is_evaluated() -> None:
    b = return_tokens(_cfg(), 32)
    assert _rows(b.val) == len(b.val.x) and len(b.val.x) % 32  # a short last batch is kept


def test_test_fraction_is_held_out() -> None:
    base, held = return_tokens(_cfg(), 32), return_tokens(_cfg("data.test_fraction=0.3"), 32)
    assert len(held.train.x) < 0.75 * len(base.train.x)
    assert 0 < len(held.val.x) <= len(base.val.x)
