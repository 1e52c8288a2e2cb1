"""docs/config.md, generated from the schema: `stride config show --markdown > docs/config.md`.

A test regenerates it and fails when the committed page differs, so the page cannot drift from the code.
"""

from __future__ import annotations

import inspect
from typing import Any

from stride.config.fields import FieldSpec, fields_of, section_classes

HEADER = """\
# Config reference

Every key of a stride run config: its type (and choices or range), its default, and what it does.
Generated from `stride/config/schema.py` by `stride config show --markdown`; do not edit by hand.
`stride config show CONFIG` prints the same for a config file, with its values beside the defaults.

A config is TOML: `[section]` tables of `key = value`, the file first, then every `--set section.key=value`
in order. An unknown key, a value of the wrong type, a choice that is not listed, a number outside its
range, and NaN or infinity in a float are errors that name the key (and the closest valid one).

**A config that cannot fit is refused before anything is built** (`stride/train/resources.py`): the model's
parameters are counted on the meta device and the synthetic market's bytes from its shape; weights, gradients
and optimizer state (16 B a parameter with AdamW) and the data, for each process on the host, are compared with
the host's available memory (and a CUDA device's free memory), and an estimate above it is one line naming the
keys, the estimate and the limit. Activations are not counted: a config that passes may still run out of memory.
`train.threads` above the cores the process may use (`os.sched_getaffinity`) is a warning.

**A config can run code.** `model.name` and `data.source` accept `module:factory`: stride imports
`module` (running its top-level code, as any Python plugin does) and calls `factory`. Run configs you
would run as Python code; nothing else in a config is executed or evaluated.
"""


def default_text(value: Any) -> str:
    """A default as it would be written in TOML (None: no value)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, dict):
        return "{}" if not value else str(value)
    return repr(value)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _row(f: FieldSpec) -> str:
    return f"| `{f.name}` | {_cell(f.describe())} | `{default_text(f.default)}` | {_cell(f.doc)} |"


def reference_markdown() -> str:
    parts = [HEADER.rstrip()]
    for section, cls in section_classes().items():
        doc = inspect.cleandoc(cls.__doc__ or "")
        parts.append(f"\n## `[{section}]`\n\n{doc}\n\n| key | type | default | what it does |\n|---|---|---|---|")
        parts += [_row(f) for f in fields_of(section).values()]
    return "\n".join(parts) + "\n"
