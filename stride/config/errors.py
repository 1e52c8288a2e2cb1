"""Config errors that name the key, what was expected, and a close match."""

from __future__ import annotations

import difflib


class ConfigError(ValueError):
    """A config key, type or value is wrong; the message names the key and the source."""


def suggest(name: str, candidates: list[str]) -> str:
    """' (did you mean `x`?)' for the closest candidate, or ''."""
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return f" (did you mean `{close[0]}`?)" if close else ""
