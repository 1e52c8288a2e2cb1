"""DCP reading that never unpickles arbitrary objects and never reads outside the checkpoint.

DCP stores tensors with `torch.save` and reads them back with `weights_only=True`, but it reads
`.metadata` with plain `pickle.load` and non-tensor values with `torch.load(weights_only=False)`:
a crafted checkpoint could run code on load. Here `.metadata` goes through an unpickler that knows an
exact list of (module, name) pairs, resolved once at import, never by following a name; non-tensor
values go through `weights_only=True`.

Why exact pairs: pickle protocol >= 4 lets a global be a dotted path that pickle resolves attribute by
attribute. The previous unpickler trusted whole modules and accepted any type found there, and
`torch.distributed.checkpoint.metadata` imports `torch`, from which `torch._strobelight.
cli_function_profiler.subprocess.Popen` is reachable: a `.metadata` naming that path ran a shell
command on resume (issue 19). The list below is every global DCP's `.metadata` holds in torch 2.13,
read from real checkpoints (one process and FSDP/TP/PP, fp32/bf16/fp16, AdamW/8-bit/Adafactor/SGD):
the metadata dataclasses, `_StorageInfo`, `torch.Size`, torch dtypes, `_get_layout` and `PosixPath`.
A pickle can still call these (they are what it is made of), and it could set attributes on these
classes themselves (BUILD with slot state on a class object), or on the objects they hand out that live for the
whole process: `_MEM_FORMAT_ENCODING`'s members (BUILD on `_MEM_FORMAT_ENCODING(0)` rewrote its `_value_`) and
`_get_layout`, whose `cache` a refused file replaced for the rest of the process ("torch.strided" ->
`PosixPath('/etc/passwd')`, audit 14 L9). So `_get_layout` is handed out as a read-only mapping's lookup (a builtin
method: no `__dict__`, no attribute can be set on it), and every other such object (`_WATCHED`: the classes, the
enum's members) has its attributes (`__dict__`, and the type slots `__name__`, `__qualname__`, `__bases__`,
`__class__`) compared before and after each load, put back, and such a file refused. The loaded object is then
checked field by field, and every file it names must be a plain file name inside the checkpoint folder that the
manifest lists.
"""

from __future__ import annotations

import importlib
import io
import itertools
import json
import pickle
import re
import types
from collections.abc import Iterable
from enum import Enum
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
from torch.distributed.checkpoint._traverse import set_element  # DCP's own setter, as its planner uses
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import ReadItem

from stride.checkpoint.manifest import SHARD_RE, Verdict, safe_relative_file, verify

META = "meta.json"

_MD = "torch.distributed.checkpoint.metadata"
ALLOWED: frozenset[tuple[str, str]] = frozenset({
    (_MD, "Metadata"), (_MD, "MetadataIndex"), (_MD, "StorageMeta"), (_MD, "TensorProperties"),
    (_MD, "TensorStorageMetadata"), (_MD, "BytesStorageMetadata"), (_MD, "ChunkStorageMetadata"),
    (_MD, "_MEM_FORMAT_ENCODING"),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),  # maps a layout's name ("torch.strided") to the layout
    ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath"),  # StorageMeta.checkpoint_id
    ("collections", "OrderedDict"),
    *(("torch", n) for n in dir(torch) if isinstance(getattr(torch, n, None), torch.dtype)),
})


def _resolve(module: str, name: str) -> Any:
    return getattr(importlib.import_module(module), name)  # `name` has no dot: one attribute, never a path


_OBJECTS: dict[tuple[str, str], Any] = {pair: _resolve(*pair) for pair in ALLOWED}
# torch's `_get_layout(name)` reads a cache kept on the function object, which BUILD could replace: the pickle gets
# the lookup of a read-only mapping instead (what the function returns for every layout name, nothing settable)
_LAYOUTS = types.MappingProxyType({str(v): v for v in vars(torch).values() if isinstance(v, torch.layout)})
_OBJECTS[("torch.serialization", "_get_layout")] = _LAYOUTS.__getitem__
# What a pickle can reach that lives on after the load and whose attributes Python code can change: the allowed
# classes and the members of the allowed enums (a class's call may return one). Watched across every load.
_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: no attribute of the type can be set (torch.Size, OrderedDict)
_WATCHED: list[Any] = [o for o in _OBJECTS.values() if isinstance(o, type) and not o.__flags__ & _IMMUTABLE_TYPE]
_WATCHED += [m for o in list(_WATCHED) if issubclass(o, Enum) for m in o]
_SLOTS = ("__name__", "__qualname__", "__bases__", "__class__")  # settable attributes outside an object's __dict__


class _MetadataUnpickler(pickle.Unpickler):
    """Hands out only the objects of ALLOWED, looked up by exact (module, name); refuses anything else."""

    def find_class(self, module: str, name: str) -> Any:
        obj = _OBJECTS.get((module, name))
        if obj is None:
            why = "a dotted name (never followed)" if "." in name else "not a DCP metadata type"
            raise pickle.UnpicklingError(f".metadata refers to {module}:{name}, {why}: refused "
                                         "(stride never unpickles arbitrary objects)")
        return obj


def _state_of(obj: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """An object's attributes as a pickle could change them: its `__dict__` and its settable type slots."""
    return dict(vars(obj)), {a: getattr(obj, a) for a in _SLOTS if hasattr(obj, a)}


def _global_state() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [_state_of(o) for o in _WATCHED]


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(a[k] is b[k] or (isinstance(a[k], str) and a[k] == b[k]) for k in a)


def _restore(before: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[str]:
    """Undo any change a pickle made to a watched object (`_WATCHED`); returns the objects it changed."""
    changed = []
    for obj, (old, old_slots) in zip(_WATCHED, before, strict=True):
        now, now_slots = _state_of(obj)
        if _same(now, old) and _same(now_slots, old_slots):
            continue
        changed.append(str(old_slots["__qualname__"]) if isinstance(obj, type)
                       else f"{old_slots['__class__'].__qualname__}.{old.get('_name_', '?')}")
        for a, v in old_slots.items():  # the type's identity first (a class renamed, an object's class swapped)
            if not _same({a: now_slots.get(a)}, {a: v}):
                setattr(obj, a, v)
        now = dict(vars(obj))
        if isinstance(obj, type):  # a class's namespace is read-only: through its attributes
            for k in now.keys() - old.keys():
                delattr(obj, k)
            for k, v in old.items():
                if now.get(k, object()) is not v:
                    setattr(obj, k, v)
        else:  # an enum member's namespace (a replaced `__dict__` too): put back whole
            d = vars(obj)
            d.clear()
            d.update(old)
    return changed


def check_metadata(md: Any, folder: Path | None = None, listed: Iterable[str] | None = None) -> Metadata:
    """The loaded object is a DCP Metadata made of the expected types, naming only files inside `folder`."""
    try:
        return _check_metadata(md, folder, listed)
    except (AttributeError, TypeError, ValueError) as exc:  # an object of the right class without its fields
        raise pickle.UnpicklingError(f".metadata is not a well-formed DCP Metadata ({type(exc).__name__}: "
                                     f"{exc})") from None


def _check_metadata(md: Any, folder: Path | None, listed: Iterable[str] | None) -> Metadata:
    if not isinstance(md, Metadata):
        raise pickle.UnpicklingError(f".metadata holds a {type(md).__name__}, not a DCP Metadata")
    sdm = md.state_dict_metadata
    if not isinstance(sdm, dict) or not all(
            isinstance(k, str) and type(v) in (TensorStorageMetadata, BytesStorageMetadata) for k, v in sdm.items()):
        raise pickle.UnpicklingError(".metadata: state_dict_metadata is not a dict of DCP storage metadata")
    for k, v in sdm.items():
        if type(v) is TensorStorageMetadata and not (
                type(v.properties) is TensorProperties and isinstance(v.properties.dtype, torch.dtype)
                and type(v.size) is torch.Size and isinstance(v.chunks, list)
                and all(type(c) is ChunkStorageMetadata and type(c.offsets) is torch.Size
                        and type(c.sizes) is torch.Size for c in v.chunks)):
            raise pickle.UnpicklingError(f".metadata: tensor entry {k!r} is not well formed")
    if md.storage_meta is not None and not isinstance(md.storage_meta, StorageMeta):
        raise pickle.UnpicklingError(".metadata: storage_meta is not a DCP StorageMeta")
    storage = md.storage_data if md.storage_data is not None else {}
    if not isinstance(storage, dict):
        raise pickle.UnpicklingError(".metadata: storage_data is not a dict")
    listed = set(listed) if listed is not None else None
    files: dict[Any, str] = {}  # relative path -> an entry naming it (each distinct path is resolved once)
    for k, v in storage.items():
        if not isinstance(k, MetadataIndex) or not isinstance(v, _StorageInfo):
            raise pickle.UnpicklingError(".metadata: storage_data holds something other than DCP storage entries")
        if not all(isinstance(x, int) and x >= 0 for x in (v.offset, v.length)):
            raise pickle.UnpicklingError(f".metadata: storage entry {k.fqn!r} has a bad offset or length")
        files.setdefault(v.relative_path if isinstance(v.relative_path, str) else repr(v.relative_path), k.fqn)
    for rel, fqn in files.items():
        if folder is not None and (why := safe_relative_file(rel, folder, listed)):
            raise pickle.UnpicklingError(f".metadata: storage entry {fqn!r}: {why}")
    return md


def load_metadata_safely(data: bytes, folder: Path | None = None, listed: Iterable[str] | None = None) -> Metadata:
    """Unpickle DCP metadata with the allow-list; refuses (UnpicklingError) anything else, nothing run."""
    before = _global_state()
    try:
        md = _MetadataUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError:
        raise
    except Exception as exc:  # a truncated or nonsensical stream: one error type for the caller
        raise pickle.UnpicklingError(f".metadata does not unpickle: {type(exc).__name__}: {exc}") from None
    finally:
        changed = _restore(before)
    if changed:
        raise pickle.UnpicklingError(f".metadata sets attributes on {', '.join(changed)} (objects that outlive the "
                                     "load; put back as they were): refused")
    return check_metadata(md, folder, listed)


def meta_problem(meta: dict[str, Any]) -> str | None:
    """What is wrong with the shape of a `meta.json` (None: nothing): the fields a resume reads, each of the
    type stride writes, so an edited one is a reason to fall back, not a traceback in the resume."""
    config = meta.get("config", {})
    if not isinstance(config, dict) or not all(isinstance(v, dict) for v in config.values()):
        return "config is not a table of config sections"
    steps = config.get("train", {}).get("steps", 1)
    if type(steps) is not int:
        return f"config.train.steps {steps!r} is not an integer"
    for key, ok in (("world_size", lambda v: type(v) is int and v > 0), ("step", lambda v: type(v) is int),
                    # train.steps of the earlier segments: increasing counts >= 1 below this segment's, the rule
                    # `stride repro` holds summary.json's copy to ([-5, 3] or [10**18] was resumed from, written
                    # into summary.json, and then refused there by repro, blaming the summary)
                    ("extended_from", lambda v: isinstance(v, list) and all(type(s) is int for s in v)
                     and all(0 < a < b for a, b in itertools.pairwise([*v, steps]))),
                    ("data", lambda v: isinstance(v, dict) and set(v) == {"n_windows", "batch_size"}
                     and all(type(x) is int and x >= 0 for x in v.values())),
                    ("data_store", lambda v: isinstance(v, dict) and set(v) == {"path", "sha256"}
                     and isinstance(v["path"], str) and isinstance(v["sha256"], dict)
                     and all(isinstance(k, str) and isinstance(x, str) for k, x in v["sha256"].items()))):
        if key in meta and not ok(meta[key]):
            return f"{key} {meta[key]!r} is not what stride writes there"
    return None


def check_checkpoint(folder: Path, step: int | None, checksums: bool = True) -> Verdict:
    """Could a run resume from `folder`? Its manifest and files (`manifest.verify`), `meta.json` and a
    `.metadata` that the allow-list unpickles, naming only files the manifest lists."""
    verdict = verify(folder, step, checksums=checksums)
    if not verdict.ok:
        return verdict
    try:
        meta = json.loads((folder / META).read_text())
        if not isinstance(meta, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError, RecursionError) as exc:
        return Verdict(False, f"{META} unreadable ({exc})", verdict.manifest)
    if why := meta_problem(meta):
        return Verdict(False, f"{META}: {why}", verdict.manifest)
    if "step" in meta and meta["step"] != (verdict.manifest or {}).get("step"):  # the folder's and manifest's step
        return Verdict(False, f"{META} says step {meta['step']}, its manifest and folder step "
                              f"{(verdict.manifest or {}).get('step')} (edited, or copied from another checkpoint)",
                       verdict.manifest)
    try:
        md = load_metadata_safely((folder / ".metadata").read_bytes(), folder,
                                  (verdict.manifest or {}).get("files", {}))
    except OSError as exc:
        return Verdict(False, f".metadata unreadable ({exc.strerror or exc})", verdict.manifest)
    except pickle.UnpicklingError as exc:
        return Verdict(False, str(exc), verdict.manifest)
    world, why = saved_world(md, meta, verdict.manifest or {})
    if why:
        return Verdict(False, why, verdict.manifest)
    return Verdict(True, "", verdict.manifest, meta, world)


_RANK_SECTION = re.compile(r"^rank(\d+)\.")  # stride's per-rank state (train_state.capture): one per saving rank


def saved_world(md: Metadata, meta: dict[str, Any], manifest: dict[str, Any]) -> tuple[int | None, str]:
    """The world size that wrote a checkpoint, from what its `.metadata` holds (not from the fields that say so),
    and why the checkpoint is refused where meta.json's or the manifest's `world_size` says otherwise.

    Every rank of a trainer's save writes its own `rank<r>.` section, so those give the count exactly; a save
    without them (a bare CheckpointStore) gives at least one more than the highest rank whose shard `.metadata`
    reads. A forged `world_size` of 4 on a 2-rank checkpoint was reported as a layout change (audit 16, L3)."""
    sections = {int(m.group(1)) for k in md.state_dict_metadata if (m := _RANK_SECTION.match(k))}
    shards = {int(m.group(1)) for v in (md.storage_data or {}).values()
              if isinstance(v.relative_path, str) and (m := SHARD_RE.match(v.relative_path))}
    exact = bool(sections)
    world = max(sections) + 1 if sections else (max(shards) + 1 if shards else None)
    for name, claimed in ((META, meta.get("world_size")), ("manifest.json", manifest.get("world_size"))):
        if world is None or type(claimed) is not int:
            continue
        if claimed != world if exact else claimed < world:
            return world, (f"{name} says world size {claimed}, but its shards were written by {world} "
                           f"rank{'s' if world != 1 else ''} (not what stride writes)")
    if not exact and type(meta.get("world_size")) is int:
        world = meta["world_size"]  # ranks that wrote no tensor leave no trace: the claim, where not contradicted
    return world, ""


class SafeFileSystemReader(FileSystemReader):
    """FileSystemReader whose `.metadata` is read by the restricted unpickler and may name only files
    inside the folder (those in `listed`, the manifest's, when given). A shard entry that torch's
    weights-only unpickler refuses is reported in stride's words, naming the shard: torch's own text is six
    lines that advise `weights_only=False`, the wrong advice for a checkpoint (audit 16, L1)."""

    def __init__(self, path: str | Path, listed: Iterable[str] | None = None) -> None:
        super().__init__(path)
        self.folder = Path(path)
        self.listed = set(listed) if listed is not None else None
        self._reading: str = "?"  # the shard file of the entry being read
        self._entry: tuple[int, int] | None = None  # and that entry's (offset, length) in it

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        # A method of this reader, not of ShardEntryError below, where audit 16's change had left it: then this
        # reader was DCP's, whose read_metadata is a plain pickle.load, on every rank at every load (the allow-list
        # ran only in rank 0's check before): a rank whose view held other .metadata bytes of the same size
        # (verify = "size") ran the pickle's code (outside audit 18)
        path = self._get_metadata_path(kwargs.get("rank"))
        with self.fs.create_stream(path, "rb") as f:
            md = load_metadata_safely(f.read(), self.folder, self.listed)
        if getattr(md, "storage_meta", None) is None:
            md.storage_meta = StorageMeta()
        md.storage_meta.load_id = self.load_id
        return md

    def _slice_file(self, file: Any, sinfo: _StorageInfo) -> Any:
        self._reading = str(sinfo.relative_path)
        self._entry = (int(sinfo.offset), int(sinfo.length))
        return super()._slice_file(file, sinfo)

    def read_data(self, plan: Any, planner: Any) -> Any:
        self._entry = None
        try:
            return super().read_data(plan, planner)
        except pickle.UnpicklingError as exc:
            raise ShardEntryError(f"a shard entry in {self._reading} is not what DCP wrote (an edited or "
                                  "mismatched .metadata, or other bytes in the shard)") from exc
        except (EOFError, RuntimeError, ValueError) as exc:
            if isinstance(exc, RuntimeError) and not re.search(r"PytorchStreamReader|central directory|zip archive|"
                                                               r"file_read|unexpected (end|eof)", str(exc), re.I):
                raise  # not the shard's bytes (out of memory, a device error): as it came (outside review)
            # torch.load's own words name no file ("EOFError: " alone for an entry cut short, or miniz's "failed
            # finding central directory"): the shard and the entry's bytes, then the cause (outside audit 18)
            where = f" bytes {self._entry[0]}-{sum(self._entry)}" if self._entry else ""
            first = " ".join(str(exc).split()).split(". ")[0][:200]  # miniz adds four sentences of advice
            cause = f"{type(exc).__name__} ({first})" if first else type(exc).__name__
            raise ShardEntryError(f"{cause} reading its .distcp shards, at {self._reading}{where}: one is not what "
                                  "DCP wrote (cut short, or other bytes)") from exc


class ShardEntryError(pickle.UnpicklingError):
    """A tensor or value in a shard that torch's weights-only unpickler refused; the message is stride's, one line."""


class SafeLoadPlanner(DefaultLoadPlanner):
    """Non-tensor values (optimizer param groups, scheduler state) are read with weights_only=True."""

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        obj = torch.load(value, weights_only=True)
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], obj)
        else:
            self.state_dict[read_item.dest_index.fqn] = obj
