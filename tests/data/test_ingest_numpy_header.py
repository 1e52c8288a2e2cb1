"""`stride data ingest` of a .npy whose header is cut short, or an .npz that is no zip archive: one line naming the
file, not numpy's parser traceback (audit 14, L5: `tokenize.TokenError: ('EOF in multi-line statement', (2, 0))`;
`zipfile.BadZipFile` for the .npz)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stride.cli.main import main


@pytest.mark.parametrize(("name", "data", "why"), [
    ("cut.npy", b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f4',\n", "its header is not a valid .npy header (cut short"),
    ("cut2.npy", b"\x93NUMPY\x01\x00\x20\x00{'descr': '<f4', 'fortran_order\n",
     "its header is not a valid .npy header (cut short"),
    ("cut.npz", b"PK\x03\x04junk", "not a complete .npz (zip) archive"),
])
def test_a_cut_numpy_file_is_one_line_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str,
                                                data: bytes, why: str) -> None:
    src = tmp_path / name
    src.write_bytes(data)
    assert main(["data", "ingest", str(src), "--out", str(tmp_path / "st")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"stride data ingest: {src}: cannot be read: {why}"), err
    assert not (tmp_path / "st").exists()
