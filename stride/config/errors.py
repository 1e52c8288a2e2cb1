"""Config errors that name the key, what was expected, and a close match."""

from __future__ import annotations

import difflib


class ConfigError(ValueError):
    """A config key, type or value is wrong; the message names the key and the source."""

    label = "config error"  # how the CLI prefixes the message (a refusal that is not the config's says so)


def suggest(name: str, candidates: list[str]) -> str:
    """' (did you mean `x`?)' for the closest candidate, or ''."""
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return f" (did you mean `{close[0]}`?)" if close else ""


def clipped(text: str, limit: int = 120) -> str:
    """`text` for an error message: at most `limit` characters, a longer one cut with its length said (a value of 10,000
    characters was printed whole, twice, outside audit 20)."""
    return text if len(text) <= limit else f"{text[:limit - 40]}... ({len(text)} characters)"
