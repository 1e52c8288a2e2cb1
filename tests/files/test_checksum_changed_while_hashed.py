"""A file truncated while `checksum_file` hashes it is an error naming it (audit 16, M3): hashed through mmap, the
read past the new end killed the process with SIGBUS and no message. Run in a subprocess: the old way kills it."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import xxhash

from stride.files.checksum import checksum_file

ROOT = Path(__file__).resolve().parents[2]

# a hasher that truncates the file after its first piece (as another process would, between two reads)
VICTIM = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    import xxhash
    from stride.files import checksum

    p = Path(sys.argv[1])
    class Cut:
        def __init__(self):
            self.h, self.n = xxhash.xxh3_128(), 0
        def update(self, b):
            self.h.update(b)
            self.n += 1
            if self.n == 1:
                os.truncate(p, 4096)
        def hexdigest(self):
            return self.h.hexdigest()
    checksum.HASHERS["cut"] = Cut
    try:
        checksum.checksum_file(p, "cut")
    except OSError as exc:
        print(exc)
        sys.exit(3)
    print("no error")
""")


def test_a_file_truncated_while_hashed_is_an_error_not_sigbus(tmp_path: Path) -> None:
    f = tmp_path / "__0_0.distcp"
    f.write_bytes(os.urandom(1 << 20) * 20)
    p = subprocess.run([sys.executable, "-c", VICTIM, str(f)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 3, (p.returncode, p.stderr[-500:])
    assert p.stdout.strip() == (f"[Errno 5] changed while it was hashed ({20 << 20} bytes when opened, 4096 bytes "
                                f"now): something else writes or truncates it: '{f}'")


def test_the_checksum_is_the_files_bytes(tmp_path: Path) -> None:
    f = tmp_path / "x.bin"
    data = os.urandom((3 << 20) + 17)  # pieces and a remainder
    f.write_bytes(data)
    assert checksum_file(f) == xxhash.xxh3_128(data).hexdigest()
    (tmp_path / "empty").write_bytes(b"")
    assert checksum_file(tmp_path / "empty", "sha256") == hashlib.sha256(b"").hexdigest()
