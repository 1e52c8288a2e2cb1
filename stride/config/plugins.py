"""`module:factory` config values (`model.name`, `data.source`): import a user's code and call it.

Importing `module` runs its top-level code, as importing any Python plugin does: a config that names
one can run code (docs/config.md says so). What stride controls is the rest: a factory that is not
callable, cannot take the arguments stride passes, or returns the wrong kind of object is a
ConfigError naming the key, not a traceback from inside stride.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

from stride.config.errors import ConfigError


def load_factory(spec: str, key: str) -> Callable[..., Any]:
    """Import `package.module:function` named at config key `key`."""
    mod_name, _, attr = spec.partition(":")
    if not mod_name or not attr:
        raise ConfigError(f"`{key}` = {spec!r} must be `module:factory`")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as exc:
        raise ConfigError(f"`{key}` = {spec!r}: cannot import module {mod_name!r}: {exc} (make its package importable: "
                          "`pip install -e DIR` of its project, or PYTHONPATH=DIR holding the package)") from exc
    fn = getattr(mod, attr, None)
    if not callable(fn):
        what = "no attribute" if fn is None else f"a {type(fn).__name__}, not a callable,"
        raise ConfigError(f"`{key}` = {spec!r}: {mod_name!r} has {what} {attr!r}")
    return fn


def call_factory(spec: str, key: str, expected: type | tuple[type, ...], **kwargs: Any) -> Any:
    """Load the factory `spec` and call it with `kwargs`; its signature must accept them and its result
    must be an instance of `expected`. Errors raised inside the factory itself propagate unchanged."""
    fn = load_factory(spec, key)
    call = f"{spec.partition(':')[2]}({', '.join(f'{k}=...' for k in kwargs)})"
    try:
        inspect.signature(fn).bind(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"`{key}` = {spec!r}: the factory cannot be called as {call}: {exc}") from exc
    except ValueError:  # no signature to inspect (a builtin written in C): no user code runs inside it
        try:
            out = fn(**kwargs)
        except TypeError as exc:
            raise ConfigError(f"`{key}` = {spec!r}: the factory cannot be called as {call}: {exc}") from exc
    else:
        out = fn(**kwargs)
    if not isinstance(out, expected):
        names = " or ".join(t.__name__ for t in (expected if isinstance(expected, tuple) else (expected,)))
        raise ConfigError(f"`{key}` = {spec!r} returned {type(out).__name__}, not {names}")
    return out
