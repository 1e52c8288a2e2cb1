"""stride.files.input_file: a file the user names is read only when it is a regular file, up to a limit.

Before it, `--hardware-file /dev/zero` read until memory ran out, a FIFO blocked `open()` forever, and a
config that was a FIFO was said to be "not found". Every test that could block (a FIFO, /dev/zero) runs under
an alarm, so a regression fails the test instead of hanging the suite.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
from pathlib import Path

import pytest

from stride.errors import StrideError
from stride.files.input_file import (
    InputFileError,
    InputFileMissing,
    InputFileTooLarge,
    NotARegularFile,
    file_kind,
    open_input_file,
    read_input_bytes,
    read_input_text,
)

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
needs_dev_zero = pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero on this platform")


@pytest.fixture(autouse=True)
def _alarm():
    """Fail, not hang, should a read block (a FIFO opened without O_NONBLOCK) or never end (/dev/zero)."""
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def _timeout(signum, frame):
        raise TimeoutError("reading the input blocked for 20 s")

    old = signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(20)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)



def test_reads_a_regular_file_up_to_its_limit(tmp_path: Path) -> None:
    p = tmp_path / "a.toml"
    p.write_bytes(b"x = 1\n")
    assert read_input_bytes(p, limit=6) == b"x = 1\n"  # exactly the limit is allowed
    assert read_input_text(str(p), limit=100, what="config file") == "x = 1\n"
    assert read_input_bytes(tmp_path / "a.toml", limit=1 << 30) == b"x = 1\n"  # a huge limit allocates nothing
    with open_input_file(p, limit=None) as f:
        assert os.get_blocking(f.fileno())  # O_NONBLOCK was for the open only
        assert f.read() == b"x = 1\n"
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert read_input_bytes(empty, limit=0) == b""


def test_a_symlink_to_a_regular_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "real.json").write_text("{}")
    (tmp_path / "link.json").symlink_to(tmp_path / "real.json")
    assert read_input_text(tmp_path / "link.json", limit=10) == "{}"


def test_missing_file_is_named(tmp_path: Path) -> None:
    p = tmp_path / "missing.toml"
    with pytest.raises(InputFileMissing, match=r"^config file not found: .*missing\.toml$") as info:
        read_input_bytes(p, limit=10, what="config file")
    assert isinstance(info.value, StrideError) and info.value.exit_code == 2 and info.value.path == p


def test_a_path_through_a_file_says_which_part_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("")
    with pytest.raises(InputFileMissing, match=r"a\.txt is a file, not a directory"):
        read_input_bytes(tmp_path / "a.txt" / "b.toml", limit=10)


@needs_fifo
def test_fifo_is_refused_at_once_naming_it(fifo: Path) -> None:
    with pytest.raises(NotARegularFile) as info:
        read_input_bytes(fifo, limit=1 << 20, what="config file")
    assert str(info.value) == f"config file {fifo} is a FIFO, not a regular file"
    assert info.value.kind == "a FIFO" and info.value.exit_code == 2
    with pytest.raises(NotARegularFile, match="is a FIFO"):
        open_input_file(fifo, limit=None)


@needs_dev_zero
def test_dev_zero_is_refused_not_read() -> None:
    with pytest.raises(NotARegularFile) as info:
        read_input_bytes("/dev/zero", limit=1 << 20, what="hardware file")
    assert str(info.value) == "hardware file /dev/zero is a character device, not a regular file"


def test_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(NotARegularFile, match=r"^efficiency file .* is a directory, not a regular file$"):
        read_input_text(tmp_path, limit=10, what="efficiency file")


@pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="no Unix sockets on this platform")
def test_socket_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "s.sock"
    s = socket.socket(socket.AF_UNIX)
    try:
        try:
            s.bind(str(p))
        except OSError as exc:  # a tmp_path too long for a socket address
            pytest.skip(f"cannot bind a Unix socket here: {exc}")
        with pytest.raises(NotARegularFile, match="is a socket, not a regular file"):
            read_input_bytes(p, limit=10)
    finally:
        s.close()


def test_file_over_the_limit_is_refused_naming_size_and_limit(tmp_path: Path) -> None:
    p = tmp_path / "big.toml"
    p.write_bytes(b"#" * 3000)
    with pytest.raises(InputFileTooLarge) as info:
        read_input_bytes(p, limit=2048, what="config file")
    assert str(info.value) == f"config file {p} is 3000 bytes (2.9 KiB), over the limit of 2048 bytes (2.0 KiB)"
    assert info.value.limit == 2048 and info.value.exit_code == 2
    with pytest.raises(InputFileTooLarge):
        open_input_file(p, limit=2999)
    assert len(read_input_bytes(p, limit=3000)) == 3000


@pytest.mark.skipif(not os.path.isfile("/proc/self/status"), reason="no /proc")
def test_a_file_that_reads_longer_than_its_stated_size_is_cut_at_the_limit() -> None:
    # /proc files state size 0 and read as much as they hold: the read itself stops past the limit
    assert os.stat("/proc/self/status").st_size == 0
    with pytest.raises(InputFileTooLarge, match=r"over the limit of 16 bytes \(it grew while being read\)"):
        read_input_bytes("/proc/self/status", limit=16)


@needs_fifo
def test_a_fifo_swapped_in_after_the_stat_neither_blocks_nor_is_read(
        tmp_path: Path, fifo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    regular = tmp_path / "regular.toml"
    regular.write_text("x = 1\n")
    real_stat = os.stat

    def stat_before_the_swap(path, *args, **kwargs):  # os.stat saw a regular file; the open finds a FIFO
        return real_stat(regular if os.fspath(path) == os.fspath(fifo) else path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat_before_the_swap)
    with pytest.raises(NotARegularFile, match="is a FIFO, not a regular file"):
        read_input_bytes(fifo, limit=100)


def test_text_that_is_not_utf8_names_the_byte(tmp_path: Path) -> None:
    p = tmp_path / "latin1.json"
    p.write_bytes(b'{"a": "caf\xe9"}')
    with pytest.raises(InputFileError, match=r"is not UTF-8 text \(byte 0xe9 at offset 10\)"):
        read_input_text(p, limit=100, what="efficiency file")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file_is_named(tmp_path: Path) -> None:
    p = tmp_path / "secret.toml"
    p.write_text("x = 1\n")
    p.chmod(0)
    try:
        with pytest.raises(InputFileError, match=r"^config file .*secret\.toml: cannot read it: permission denied$"):
            read_input_bytes(p, limit=100, what="config file")
    finally:
        p.chmod(stat.S_IRUSR | stat.S_IWUSR)


def test_an_open_refused_by_the_system_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "a.toml"
    p.write_text("x = 1\n")

    def refuse(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(os, "open", refuse)  # as for a non-root user on a mode-000 file
    with pytest.raises(InputFileError, match=r"^hardware file .*a\.toml: cannot read it: permission denied$"):
        read_input_text(p, limit=100, what="hardware file")


def test_message_is_one_line_and_a_nul_byte_is_an_error(tmp_path: Path) -> None:
    p = tmp_path / "a\nb.toml"
    with pytest.raises(InputFileMissing) as info:
        read_input_bytes(p, limit=10)
    assert "\n" not in str(info.value) and "a\\nb.toml" in str(info.value)
    with pytest.raises(InputFileMissing, match="NUL byte"):
        read_input_bytes("a\0b", limit=10)


def test_file_kind_words() -> None:
    assert file_kind(stat.S_IFIFO) == "a FIFO"
    assert file_kind(stat.S_IFCHR) == "a character device"
    assert file_kind(stat.S_IFBLK) == "a block device"
    assert file_kind(stat.S_IFDIR) == "a directory"
    assert file_kind(stat.S_IFREG) == "a regular file"


def test_not_found_or_special_says_what_a_path_is(tmp_path: Path) -> None:
    from stride.files.input_file import not_found_or_special

    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    assert not_found_or_special(fifo) == f"{fifo} is a FIFO, not a regular file"
    assert not_found_or_special(tmp_path / "gone") == f"{tmp_path / 'gone'}: no such file or directory"


@pytest.mark.parametrize("args", [["analyze"], ["data", "ingest", "--out", "STORE"], ["launch", "slurm", "--dry-run"]])
def test_commands_name_a_fifo_for_what_it_is(tmp_path: Path, args: list[str]) -> None:
    """analyze, data ingest and launch slurm said "no such file" / "config file not found" of a FIFO."""
    import subprocess
    import sys

    fifo = tmp_path / "in.json"
    os.mkfifo(fifo)
    cmd = [a.replace("STORE", str(tmp_path / "st")) for a in args]
    cmd.insert(2 if args[0] in ("data", "launch") else 1, str(fifo))
    res = subprocess.run([sys.executable, "-m", "stride", *cmd], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    assert f"{fifo} is a FIFO, not a regular file" in res.stderr


def test_plan_from_csv_names_a_fifo(fifo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from stride.cli.main import main

    assert main(["plan", "--from-csv", str(fifo)]) == 2
    assert f"--from-csv: {fifo} is a FIFO, not a regular file" in capsys.readouterr().err
