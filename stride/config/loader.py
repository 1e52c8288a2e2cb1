"""Load a RunConfig from TOML files and dotted `--set key=value` overrides.

Nothing is `eval`ed: override values are parsed as TOML literals (numbers, booleans, strings,
arrays) and fall back to a bare string. Every key, type, choice and range is checked against
`schema.py`, so an unknown key or a wrong value is an error naming the key and where it came from.
"""

from __future__ import annotations

import dataclasses
import difflib
import tomllib
from pathlib import Path
from typing import Any

from stride.config.errors import ConfigError, clipped, suggest
from stride.config.fields import coerce, fields_of
from stride.config.schema import RunConfig
from stride.config.validate import validate
from stride.files.input_file import InputFileError, read_input_bytes

CONFIG_MAX_BYTES = 16 << 20  # a run config is a few KiB; a larger file is not one


def _home(key: str) -> str:
    """"; did you mean `train.steps`?" for a key written without its section (the sections holding it), else ""."""
    homes = [f"`{f.name}.{key}`" for f in dataclasses.fields(RunConfig) if key in fields_of(f.name)]
    return f"; did you mean {' or '.join(homes)}?" if homes else ""


def _apply_table(cfg: RunConfig, table: dict[str, Any], where: str) -> None:
    sections = {f.name: f for f in dataclasses.fields(RunConfig)}
    for sec_name, sec_values in table.items():
        if sec_name not in sections and not isinstance(sec_values, dict) and _home(sec_name):
            raise ConfigError(f"{where}: `{sec_name} = {sec_values!r}` is outside every section: keys belong under "
                              f"a [section]{_home(sec_name)}")
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
        raise ConfigError(f"{where}: `{dotted}` must be `section.key`, e.g. `optim.lr`"
                          + (_home(dotted) if len(parts) == 1 else ""))
    sec_name, key = parts
    sections = {f.name for f in dataclasses.fields(RunConfig)}
    if sec_name not in sections:  # the sections listed, as a TOML file's unknown [section] is (audit 21, L4)
        raise ConfigError(f"{where}: unknown section `{sec_name}`{suggest(sec_name, sorted(sections))}; sections are "
                          f"{', '.join(f.name for f in dataclasses.fields(RunConfig))}")
    specs = fields_of(sec_name)
    if key not in specs:
        full = [f"{sec_name}.{k}" for k in specs]
        raise ConfigError(
            f"{where}: unknown key `{dotted}`{suggest(dotted, full)}; "
            f"[{sec_name}] has {', '.join(specs)}"
        )
    setattr(getattr(cfg, sec_name), key, coerce(value, specs[key].annotation, dotted, where))


def parse_override(text: str) -> tuple[str, Any]:
    """`optim.lr=3e-4` -> ("optim.lr", 0.0003). Values are TOML literals, else plain strings."""
    if "=" not in text:
        raise ConfigError(f"--set `{text}`: expected key=value, e.g. --set optim.lr=3e-4")
    key, raw = text.split("=", 1)
    key, raw = key.strip(), raw.strip()
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except ValueError as exc:  # TOMLDecodeError; an integer over 4300 digits is a plain ValueError (a traceback)
        if not isinstance(exc, tomllib.TOMLDecodeError):
            raise ConfigError(f"--set `{text[:60]}...`: {exc}") from None
        value = raw
    except RecursionError:  # a value nested thousands deep: a traceback from tomllib
        raise ConfigError(f"--set `{text[:60]}...`: the value is nested too deeply to read") from None
    return key, value


def _missing_hint(p: Path) -> str:
    """Where a missing relative path was looked for, and a near name in its folder (outside audit 12: "not found:
    configs/quickstart.toml" from another directory did not say it was read against the current one)."""
    if p.exists():
        return ""
    hint = "" if p.is_absolute() else f" (looked for {p.resolve()}: relative paths are read from the current directory)"
    folder = p.resolve().parent
    if folder.is_dir():
        # on the stems: the shared ".toml" made "none.toml" near "newhw.toml" (first-contact audit of 2026-12-06)
        stems = {c.stem: c.name for c in folder.glob("*.toml")}
        near = difflib.get_close_matches(p.stem, list(stems), n=1, cutoff=0.75)
        if near:
            hint += f"; did you mean {p.with_name(stems[near[0]])}?"
    return hint


def read_toml(p: Path) -> dict[str, Any]:
    """A config file's table; a ConfigError naming the file when it is missing, not a regular file (a FIFO, a device),
    over CONFIG_MAX_BYTES, unreadable, not text, or not TOML."""
    try:  # a regular file only: a FIFO or /dev/zero is refused, not read forever
        data = read_input_bytes(p, limit=CONFIG_MAX_BYTES, what="config file")
    except InputFileError as exc:
        raise ConfigError(str(exc) + _missing_hint(p)) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not a TOML config (not UTF-8 text: byte {exc.object[exc.start]:#04x} at offset "
                          f"{exc.start})") from exc
    try:
        return tomllib.loads(text)
    except ValueError as exc:  # TOMLDecodeError, and an integer over 4300 digits (a plain ValueError: a traceback)
        raise ConfigError(f"{p}: not valid TOML: {exc}") from None
    except RecursionError:  # arrays or tables nested thousands deep: a traceback from tomllib (audit 14, L4)
        raise ConfigError(f"{p}: not valid TOML: nested too deeply to read (no run config nests past a few "
                          "levels)") from None


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    *,
    table: dict[str, Any] | None = None,
) -> RunConfig:
    """Defaults, then the TOML file (or an in-memory table), then the overrides; then validated."""
    cfg = RunConfig()
    if path is not None:
        _apply_table(cfg, read_toml(Path(path)), str(path))
    if table is not None:
        _apply_table(cfg, table, "config table")
    for text in overrides or []:
        key, value = parse_override(text)
        set_key(cfg, key, value, f"--set {clipped(text)}")
    validate(cfg)
    return cfg


def config_to_dict(cfg: RunConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def field_names(cls: type) -> tuple[str, ...]:
    """A dataclass's field names, in order (dataclasses.fields, once per class)."""
    if cls not in _FIELD_NAMES:
        _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return _FIELD_NAMES[cls]


def config_view(cfg: RunConfig) -> dict[str, dict[str, Any]]:
    """`config_to_dict(cfg)` for reading, not for keeping: the values are the config's own, not copies, and a
    dataclass inside a section (the schema has none) stays one; 7 against 90 us (a 100,000-point sweep hashes and
    packs every point's config)."""
    out = {}
    for name in field_names(type(cfg)):
        sec = getattr(cfg, name)
        if not (dataclasses.is_dataclass(sec) and hasattr(sec, "__dict__")):
            return dataclasses.asdict(cfg)
        d = sec.__dict__
        out[name] = {k: d[k] for k in field_names(type(sec))}
    return out


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
    try:  # the JSON of config_view is config_to_dict's, without copying every value first
        return table_hash(config_view(cfg))
    except TypeError:  # a value JSON cannot hold as it is (a dataclass inside a section): asdict's form
        return table_hash(config_to_dict(cfg))


def table_hash(table: dict) -> str:
    """`config_hash` of a config given as its dict (config_to_dict's form, or a checkpoint's recorded `config`)."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(table, sort_keys=True).encode()).hexdigest()[:16]
