"""DCP reading that never unpickles arbitrary objects.

DCP stores tensors with `torch.save` and reads them back with `weights_only=True`, but it reads
`.metadata` with plain `pickle.load` and non-tensor values with `torch.load(weights_only=False)`:
a crafted checkpoint could run code on load. Here `.metadata` goes through an unpickler that only
builds DCP's own metadata classes, and non-tensor values through `weights_only=True`.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

import torch
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
from torch.distributed.checkpoint._traverse import set_element  # DCP's own setter, as its planner uses
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import ReadItem

_METADATA_MODULES = ("torch.distributed.checkpoint.metadata", "torch.distributed.checkpoint.filesystem")
_ALLOWED: set[tuple[str, str]] = {
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("pathlib", "PosixPath"),
    ("pathlib", "WindowsPath"),
    ("pathlib", "PurePosixPath"),
    ("collections", "OrderedDict"),
}


class _MetadataUnpickler(pickle.Unpickler):
    """Builds only DCP metadata dataclasses, torch dtypes/Size/layout and paths; refuses anything else."""

    def find_class(self, module: str, name: str) -> Any:
        if module in _METADATA_MODULES and not name.startswith("__"):
            obj = super().find_class(module, name)
            if isinstance(obj, type) or name == "_MEM_FORMAT_ENCODING":
                return obj
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            f"checkpoint metadata refers to {module}.{name}, which is not a DCP metadata type: refused "
            "(stride never unpickles arbitrary objects)"
        )


def load_metadata_safely(data: bytes) -> Metadata:
    md = _MetadataUnpickler(io.BytesIO(data)).load()
    if not isinstance(md, Metadata):
        raise pickle.UnpicklingError(f"checkpoint metadata is a {type(md).__name__}, not a DCP Metadata")
    return md


class SafeFileSystemReader(FileSystemReader):
    """FileSystemReader whose `.metadata` is read by the restricted unpickler."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        path = self._get_metadata_path(kwargs.get("rank"))
        with self.fs.create_stream(path, "rb") as f:
            md = load_metadata_safely(f.read())
        if getattr(md, "storage_meta", None) is None:
            md.storage_meta = StorageMeta()
        md.storage_meta.load_id = self.load_id
        return md


class SafeLoadPlanner(DefaultLoadPlanner):
    """Non-tensor values (optimizer param groups, scheduler state) are read with weights_only=True."""

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        obj = torch.load(value, weights_only=True)
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], obj)
        else:
            self.state_dict[read_item.dest_index.fqn] = obj
