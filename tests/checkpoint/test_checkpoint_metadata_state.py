"""A refused `.metadata` leaves no state of the process changed (audit 14, L9).

The allow-list's before/after comparison watched the allowed classes only. `torch.serialization._get_layout` is an
allowed function with a `__dict__`: `GLOBAL _get_layout; {cache: {"torch.strided": PosixPath("/etc/passwd")}};
BUILD` was refused ("holds a function, not a DCP Metadata") but left `_get_layout("torch.strided")` returning
`PosixPath('/etc/passwd')` for the rest of the process. BUILD on a member of `_MEM_FORMAT_ENCODING` (which a call of
the allowed enum returns) rewrote its value the same way, and slot state could rename an allowed class.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator

import pytest
import torch
import torch.serialization
from torch.distributed.checkpoint.metadata import _MEM_FORMAT_ENCODING, Metadata

from stride.checkpoint.safe_read import load_metadata_safely


def _x(b: bytes) -> bytes:  # pickle BINUNICODE
    return b"X" + len(b).to_bytes(4, "little") + b


LAYOUT_POISON = (b"\x80\x02ctorch.serialization\n_get_layout\n}" + _x(b"cache") + b"}" + _x(b"torch.strided")
                 + b"cpathlib\nPosixPath\n" + _x(b"/etc/passwd") + b"\x85Rssb.")
ENUM_POISON = (b"\x80\x02ctorch.distributed.checkpoint.metadata\n_MEM_FORMAT_ENCODING\nK\x00\x85R}" + _x(b"_value_")
               + b"K\x05sb.")
RENAME_CLASS = (b"\x80\x02ctorch.distributed.checkpoint.metadata\nMetadata\nN}" + _x(b"__qualname__") + _x(b"Evil")
                + b"s\x86b.")


@pytest.fixture(autouse=True)
def put_back() -> Iterator[None]:
    """Whatever a failing run of these tests changed is put back, so no other test sees it."""
    layout = dict(vars(torch.serialization._get_layout))
    members = [dict(vars(m)) for m in _MEM_FORMAT_ENCODING]
    name = Metadata.__qualname__
    yield
    vars(torch.serialization._get_layout).clear()
    vars(torch.serialization._get_layout).update(layout)
    for m, d in zip(_MEM_FORMAT_ENCODING, members, strict=True):
        vars(m).clear()
        vars(m).update(d)
    Metadata.__qualname__ = name


def test_a_refused_metadata_cannot_change_torchs_layout_lookup() -> None:
    torch.serialization._get_layout("torch.strided")  # torch's cache filled, as after any load
    before = dict(vars(torch.serialization._get_layout))
    with pytest.raises(pickle.UnpicklingError):
        load_metadata_safely(LAYOUT_POISON)
    assert torch.serialization._get_layout("torch.strided") is torch.strided
    assert vars(torch.serialization._get_layout) == before


def test_a_refused_metadata_cannot_change_an_enum_member_it_was_handed() -> None:
    with pytest.raises(pickle.UnpicklingError, match="sets attributes on _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT"):
        load_metadata_safely(ENUM_POISON)
    assert [m.value for m in _MEM_FORMAT_ENCODING] == [0, 1, 2]


def test_a_refused_metadata_cannot_rename_an_allowed_class() -> None:
    with pytest.raises(pickle.UnpicklingError, match="sets attributes on Metadata"):
        load_metadata_safely(RENAME_CLASS)
    assert Metadata.__qualname__ == "Metadata"
