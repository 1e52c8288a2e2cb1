"""A tiny YAML writer for manifests: dicts, lists, strings, numbers, booleans, None (block style).

String values are always double-quoted JSON strings, which YAML 1.2 reads back verbatim, so nothing
like `on`, `1e3` or `08` changes type on the way to the cluster. No new dependency for one format.
"""

from __future__ import annotations

import json
import re
from typing import Any

PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]*$")
YAML11_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}


def _key(k: str) -> str:
    """Keys stay plain where no YAML 1.1 or 1.2 reader could take them for anything but a string."""
    return k if PLAIN_KEY.match(k) and k.lower() not in YAML11_WORDS else json.dumps(k)


def _scalar(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return json.dumps(v)
    if isinstance(v, str):
        return json.dumps(v)
    raise TypeError(f"cannot write {type(v).__name__} {v!r} as YAML")


def _lines(v: Any, indent: int) -> list[str]:
    pad = "  " * indent
    if isinstance(v, dict):
        if not v:
            return [pad + "{}"]
        out = []
        for k, x in v.items():
            if not isinstance(k, str):
                raise TypeError(f"YAML keys must be strings here, got {k!r}")
            if isinstance(x, dict | list) and x:
                out.append(f"{pad}{_key(k)}:")
                out += _lines(x, indent + 1)
            else:
                out.append(f"{pad}{_key(k)}: {_inline(x)}")
        return out
    if isinstance(v, list):
        if not v:
            return [pad + "[]"]
        out = []
        for x in v:
            if isinstance(x, dict | list) and x:
                sub = _lines(x, indent + 1)
                out.append(f"{pad}- {sub[0].lstrip()}")
                out += sub[1:]
            else:
                out.append(f"{pad}- {_inline(x)}")
        return out
    return [pad + _scalar(v)]


def _inline(x: Any) -> str:
    if isinstance(x, dict) and not x:
        return "{}"
    if isinstance(x, list) and not x:
        return "[]"
    return _scalar(x)


def dump_yaml(docs: list[Any]) -> str:
    """Several documents separated by `---`."""
    return "".join("---\n" + "\n".join(_lines(d, 0)) + "\n" for d in docs)
