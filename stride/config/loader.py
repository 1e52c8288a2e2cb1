"""Load a RunConfig from TOML files and dotted `--set key=value` overrides.

Nothing is `eval`ed: override values are parsed as TOML literals (numbers, booleans, strings,
arrays) and fall back to a bare string. Every key and type is checked against the dataclasses
in `schema.py`, so an unknown key or wrong type is an error naming the key and where it came from.
"""

from __future__ import annotations

import dataclasses
import tomllib
import types
import typing
from pathlib import Path
from typing import Any

from stride.config.errors import ConfigError, suggest
from stride.config.schema import RunConfig
from stride.config.validate import validate

_NONE_WORDS = {"none", "null"}


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _coerce(value: Any, tp: Any, key: str, where: str) -> Any:
    """Check `value` against annotation `tp`; return it converted (int -> float where allowed)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        is_none = value is None or (isinstance(value, str) and value.lower() in _NONE_WORDS)
        if is_none and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key, where)
            except ConfigError as exc:
                errors.append(exc)
        raise errors[0]
    if origin is list:
        (item_tp,) = typing.get_args(tp) or (Any,)
        if not isinstance(value, list):
            raise ConfigError(f"{where}: `{key}` expects a list, got {type(value).__name__} {value!r}")
        return [_coerce(v, item_tp, f"{key}[{i}]", where) for i, v in enumerate(value)]
    if tp is dict or origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: `{key}` expects a table, got {type(value).__name__} {value!r}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: `{key}` expects true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: `{key}` expects an integer, got {type(value).__name__} {value!r}")
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{where}: `{key}` expects a number, got {type(value).__name__} {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{where}: `{key}` expects a string, got {type(value).__name__} {value!r}")
    if tp is Any:
        return value
    raise ConfigError(f"{where}: `{key}` has an unsupported annotation {tp!r}")


def _apply_table(cfg: RunConfig, table: dict[str, Any], where: str) -> None:
    sections = {f.name: f for f in dataclasses.fields(RunConfig)}
    for sec_name, sec_values in table.items():
        if sec_name not in sections:
            raise ConfigError(
                f"{where}: unknown section `[{sec_name}]`{suggest(sec_name, list(sections))}; "
                f"sections are {', '.join(sections)}"
            )
        if not isinstance(sec_values, dict):
            raise ConfigError(f"{where}: `{sec_name}` must be a table like [{sec_name}], got {sec_values!r}")
        for key, value in sec_values.items():
            set_key(cfg, f"{sec_name}.{key}", value, where)


def set_key(cfg: RunConfig, dotted: str, value: Any, where: str = "--set") -> None:
    """Set `section.key` on cfg after checking the key exists and the value has the right type."""
    parts = dotted.split(".")
    if len(parts) != 2:
        raise ConfigError(f"{where}: `{dotted}` must be `section.key`, e.g. `optim.lr`")
    sec_name, key = parts
    sections = {f.name for f in dataclasses.fields(RunConfig)}
    if sec_name not in sections:
        raise ConfigError(f"{where}: unknown section `{sec_name}`{suggest(sec_name, sorted(sections))}")
    section = getattr(cfg, sec_name)
    hints = _hints(type(section))
    if key not in hints:
        full = [f"{sec_name}.{k}" for k in hints]
        raise ConfigError(
            f"{where}: unknown key `{dotted}`{suggest(dotted, full)}; "
            f"[{sec_name}] has {', '.join(hints)}"
        )
    setattr(section, key, _coerce(value, hints[key], dotted, where))


def parse_override(text: str) -> tuple[str, Any]:
    """`optim.lr=3e-4` -> ("optim.lr", 0.0003). Values are TOML literals, else plain strings."""
    if "=" not in text:
        raise ConfigError(f"--set `{text}`: expected key=value, e.g. --set optim.lr=3e-4")
    key, raw = text.split("=", 1)
    key, raw = key.strip(), raw.strip()
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key, value


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    *,
    table: dict[str, Any] | None = None,
) -> RunConfig:
    """Defaults, then the TOML file (or an in-memory table), then the overrides; then validated."""
    cfg = RunConfig()
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file not found: {p}")
        try:
            data = tomllib.loads(p.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{p}: not valid TOML: {exc}") from exc
        _apply_table(cfg, data, str(p))
    if table is not None:
        _apply_table(cfg, table, "config table")
    for text in overrides or []:
        key, value = parse_override(text)
        set_key(cfg, key, value, f"--set {text}")
    validate(cfg)
    return cfg


def config_to_dict(cfg: RunConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {v!r} as TOML")


def config_to_toml(cfg: RunConfig) -> str:
    """The resolved config as TOML (None values are omitted, as TOML has no null)."""
    lines: list[str] = []
    for sec, values in config_to_dict(cfg).items():
        lines.append(f"[{sec}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in values.items() if v is not None]
        lines.append("")
    return "\n".join(lines)


def config_hash(cfg: RunConfig) -> str:
    import hashlib
    import json

    blob = json.dumps(config_to_dict(cfg), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
