r"""A tiny YAML writer for manifests: dicts, lists, strings, numbers, booleans, None (block style).

String values are always double-quoted, so nothing like `on`, `1e3` or `08` changes type on the way to
the cluster. The escapes are YAML's own: JSON's were used before, and JSON writes a character beyond
U+FFFF as a surrogate pair (`\ud83d\ude00`), which a YAML reader takes as two lone surrogates: an emoji in
a config's comment reached the pod's ConfigMap as garbage. Here every character outside printable ASCII
is `\uXXXX` or `\UXXXXXXXX` (YAML 1.1 and 1.2 both read them), so the text arrives exactly and the file
stays ASCII. No new dependency for one format.
"""

from __future__ import annotations

import json
import re
from typing import Any

PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]*$")
YAML11_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}


def quoted(text: str) -> str:
    """`text` as a YAML double-quoted scalar that every reader reads back exactly."""
    out = ['"']
    for c in text:
        o = ord(c)
        if c in '"\\':
            out.append("\\" + c)
        elif 0x20 <= o < 0x7F:
            out.append(c)
        else:
            out.append(f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}")
    out.append('"')
    return "".join(out)


def _key(k: str) -> str:
    """Keys stay plain where no YAML 1.1 or 1.2 reader could take them for anything but a string."""
    return k if PLAIN_KEY.fullmatch(k) and k.lower() not in YAML11_WORDS else quoted(k)


def _scalar(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return json.dumps(v)
    if isinstance(v, str):
        return quoted(v)
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
