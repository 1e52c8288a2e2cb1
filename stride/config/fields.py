"""The schema read as data: every key's type, choices, constraint, default and docstring, and the one
check of a value against them (used by the loader, by `validate`, `stride config show` and docs/config.md).

Field docstrings are the string literals written under each field in `schema.py` (as torchtitan's job
config does); they are read from its source with `ast`, so the schema stays plain dataclasses.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import json
import types
import typing
from dataclasses import dataclass
from typing import Any

from stride.config import schema
from stride.config.constraints import FINITE, Length, Matches, MaxBytes, Range
from stride.config.errors import ConfigError, clipped, suggest

_NONE_WORDS = {"none", "null"}
_CONSTRAINTS = (Range, Matches, Length, MaxBytes)


@dataclass(frozen=True)
class FieldSpec:
    section: str
    name: str
    annotation: Any  # as written, Annotated and Optional included
    default: Any
    doc: str

    @property
    def key(self) -> str:
        return f"{self.section}.{self.name}"

    @property
    def optional(self) -> bool:
        return type(None) in typing.get_args(self.annotation) and _is_union(self.annotation)

    @property
    def base(self) -> Any:
        """The type without Optional and Annotated (`float`, `list[int]`, a Literal, ...)."""
        return _strip(self.annotation)

    @property
    def choices(self) -> tuple[str, ...] | None:
        return typing.get_args(self.base) if typing.get_origin(self.base) is typing.Literal else None

    def describe(self) -> str:
        """The type in words: 'int > 0, or none', 'one of: fp32, bf16, fp16', 'list of float in (0, 1)'."""
        return describe(self.annotation)


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _split(tp: Any) -> tuple[Any, list[Any]]:
    """(base type, constraints) of `Annotated[base, c1, c2]` (or of `tp` itself)."""
    if typing.get_origin(tp) is typing.Annotated:
        base, *extra = typing.get_args(tp)
        return base, [c for c in extra if isinstance(c, _CONSTRAINTS)]
    return tp, []


def _strip(tp: Any) -> Any:
    """The type without Optional and Annotated."""
    if _is_union(tp):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        tp = args[0] if len(args) == 1 else tp
    return _split(tp)[0]


def describe(tp: Any) -> str:
    if _is_union(tp):
        parts = [describe(a) for a in typing.get_args(tp) if a is not type(None)]
        return " or ".join(parts) + (", or none" if type(None) in typing.get_args(tp) else "")
    base, constraints = _split(tp)
    words = {bool: "true/false", int: "int", float: "float", str: "string", dict: "table"}
    if typing.get_origin(base) is typing.Literal:
        text = "one of: " + ", ".join(typing.get_args(base))
    elif typing.get_origin(base) is list:
        text = f"list of {describe(typing.get_args(base)[0])}"
    else:
        text = words.get(base, getattr(base, "__name__", str(base)))
    for c in constraints:
        text += f" ({c.describe()})" if isinstance(c, Length | MaxBytes) else f" {c.describe()}" \
            if isinstance(c, Range) else f" ({c.expected})"
    return text


@functools.cache
def _docstrings() -> dict[tuple[str, str], str]:
    """(class name, field name) -> the docstring under that field in schema.py."""
    tree = ast.parse(inspect.getsource(schema))
    out: dict[tuple[str, str], str] = {}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        body = cls.body
        for stmt, nxt in zip(body, [*body[1:], None], strict=True):
            if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and isinstance(nxt, ast.Expr)
                    and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
                out[(cls.name, stmt.target.id)] = inspect.cleandoc(nxt.value.value)
    return out


def section_classes() -> dict[str, type]:
    """Section name -> its dataclass, in RunConfig's order."""
    hints = typing.get_type_hints(schema.RunConfig)
    return {f.name: hints[f.name] for f in dataclasses.fields(schema.RunConfig)}


@functools.cache
def all_fields() -> tuple[FieldSpec, ...]:
    docs = _docstrings()
    out = []
    for section, cls in section_classes().items():
        hints = typing.get_type_hints(cls, include_extras=True)
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            out.append(FieldSpec(section, f.name, hints[f.name], default, docs.get((cls.__name__, f.name), "")))
    return tuple(out)


def fields_of(section: str) -> dict[str, FieldSpec]:
    return {f.name: f for f in all_fields() if f.section == section}


def coerce(value: Any, tp: Any, key: str, where: str = "") -> Any:
    """`value` checked against annotation `tp` (type, choices, constraints) and converted (int -> float where
    a float is expected); a ConfigError naming `key` (and `where` it came from) otherwise."""
    if _is_union(tp):
        args = typing.get_args(tp)
        if type(None) in args and (value is None or (isinstance(value, str) and value.lower() in _NONE_WORDS)):
            return None
        errors = []
        for arg in args:
            if arg is not type(None):
                try:
                    return coerce(value, arg, key, where)
                except ConfigError as exc:
                    errors.append((arg, exc))
        # the error of the alternative the value looks like (a string: the choices; a number: its range),
        # and the whole type where there are several
        exc = next((e for a, e in errors if _same_kind(value, a)), errors[0][1])
        raise exc if len(errors) == 1 else ConfigError(f"{exc}; expected {describe(tp)}")
    base, constraints = _split(tp)
    value = _coerce_base(value, base, key, where)
    at = f"{where}: " if where else ""
    if isinstance(value, float) and not any(isinstance(c, Range) for c in constraints):
        constraints = [FINITE]
    for c in constraints:
        problem = c.violated(value)
        if problem:
            raise ConfigError(f"{at}`{key}` = {clipped(repr(value))} {problem}")
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        # TOML's integers are 64-bit; Python's parser takes any size (after the field's own range, which says more)
        raise ConfigError(f"{at}`{key}` = {value} is outside the 64-bit integers TOML allows")
    return value


def _list_hint(value: Any, item_tp: Any, key: str, where: str) -> str:
    """'; a TOML list is written in brackets: --set 'data.columns=["mid", "spread"]'' for a list key given a scalar:
    `--set data.columns=mid,spread` (and `[mid]`, unquoted names) was refused as "expects a list, got str" without the
    form that works (first-contact audit of 2026-12-07)."""
    if isinstance(value, (dict, bool)) or value is None:
        return ""
    parts = [p.strip().strip("'\"") for p in str(value).strip().strip("[]").split(",")]
    parts = [p for p in parts if p]
    if not parts:
        return ""
    text = _split(item_tp)[0] is str
    shown = "[" + ", ".join(json.dumps(p) if text else p for p in parts) + "]"
    section, _, name = key.rpartition(".")
    form = f"--set '{key}={shown}'" if where.startswith("--set") else f"{name} = {shown} (under [{section}])"
    return clipped(f"; a TOML list is written in brackets{', strings quoted' if text else ''}: {form}", 200)


def _same_kind(value: Any, tp: Any) -> bool:
    base = _split(tp)[0]
    if typing.get_origin(base) is typing.Literal:
        return isinstance(value, str)
    return isinstance(value, bool) if base is bool else isinstance(value, base) if isinstance(base, type) else False


def _coerce_base(value: Any, tp: Any, key: str, where: str) -> Any:
    at = f"{where}: " if where else ""
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        options = typing.get_args(tp)
        if value not in options:
            close = suggest(value, list(options)) if isinstance(value, str) else ""
            raise ConfigError(f"{at}`{key}` = {value!r} is not one of {', '.join(options)}{close}")
        return value
    if origin is list:
        (item_tp,) = typing.get_args(tp) or (Any,)
        if not isinstance(value, list):
            raise ConfigError(f"{at}`{key}` expects a list, got {type(value).__name__} {value!r}"
                              f"{_list_hint(value, item_tp, key, where)}")
        return [coerce(v, item_tp, f"{key}[{i}]", where) for i, v in enumerate(value)]
    if tp is dict or origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{at}`{key}` expects a table, got {type(value).__name__} {value!r}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{at}`{key}` expects true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{at}`{key}` expects an integer, got {type(value).__name__} {value!r}")
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{at}`{key}` expects a number, got {type(value).__name__} {value!r}")
    if tp is str:
        if isinstance(value, str):
            if "\x00" in value:  # no name, path or URI holds one: os.mkdir raised "embedded null byte" (audit 20)
                raise ConfigError(f"{at}`{key}` = {clipped(repr(value))} holds a NUL character (\\x00), which no "
                                  "name, path or URI can")
            return value
        raise ConfigError(f"{at}`{key}` expects a string, got {type(value).__name__} {clipped(repr(value))}")
    if tp is Any:
        return value
    raise ConfigError(f"{at}`{key}` has an unsupported annotation {tp!r}")


def check_fields(cfg: schema.RunConfig) -> None:
    """Every field of `cfg` against the schema: what the loader checks key by key, for a config built in Python."""
    for spec in all_fields():
        coerce(getattr(getattr(cfg, spec.section), spec.name), spec.annotation, spec.key)
