"""Config errors that name the key, what was expected, and a close match."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class ConfigError(ValueError):
    """A config key, type or value is wrong; the message names the key and the source."""

    label = "config error"  # how the CLI prefixes the message (a refusal that is not the config's says so)


# Other trainers' names for stride's keys, which spelling alone does not lead to: `optim.learning_rate` was answered
# "did you mean `optim.min_lr_ratio`?" (first-contact audit of 2026-12-07).
SYNONYMS = {
    "learning_rate": "lr", "max_steps": "steps", "num_steps": "steps", "total_steps": "steps", "bs": "batch_size",
    "batch": "batch_size", "wd": "weight_decay", "warmup": "warmup_steps", "num_warmup_steps": "warmup_steps",
    "gradient_accumulation_steps": "grad_accum", "accumulate_grad_batches": "grad_accum", "max_grad_norm": "grad_clip",
    "gradient_clip_val": "grad_clip", "clip_grad_norm": "grad_clip", "dtype": "precision",
    "mixed_precision": "precision",
    "lookback": "seq_len", "window": "seq_len", "features": "columns", "target": "target_column",
}


def suggest(name: str, candidates: list[str]) -> str:
    """' (did you mean `x`?)' for another trainer's name of a key (SYNONYMS), else the closest candidate, or ''."""
    head, dot, last = name.rpartition(".")
    alias = f"{head}{dot}{SYNONYMS[last]}" if last in SYNONYMS else None
    close = [alias] if alias in candidates else difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return f" (did you mean `{close[0]}`?)" if close else ""


def first_few(items: Iterable[object], n: int) -> str:
    """The first `n` of `items` for a message, comma-separated, ", ..." after them where there are more (a refusal
    names a few values that work, not all of them)."""
    shown = list(items)
    return ", ".join(map(str, shown[:n])) + (", ..." if len(shown) > n else "")


def clipped(text: str, limit: int = 120) -> str:
    """`text` for an error message: at most `limit` characters, a longer one cut with its length said (a value of 10,000
    characters was printed whole, twice, outside audit 20)."""
    return text if len(text) <= limit else f"{text[:limit - 40]}... ({len(text)} characters)"
