"""The `stride` process ends without CPython's teardown of every object (stride.cli.process_exit): 0.7-2 s after a
command that imported the trainer (Zen 5, 2 cores). What that teardown did that anyone can see must still happen:
each test runs a real process through the real entry points (`python -m stride`, the console script's `entry`) and
compares with `STRIDE_FULL_EXIT=1`, the interpreter's own shutdown."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "configs" / "quickstart.toml"


def run(args: list[str], full: bool = False, code: str | None = None,
        **kw: object) -> subprocess.CompletedProcess[str]:
    """`python -m stride ARGS`, or `python -c CODE ARGS` (a script ending in stride's entry), with the fast end on
    or (full) off."""
    env = {k: v for k, v in os.environ.items() if k != "STRIDE_FULL_EXIT"}
    if full:
        env["STRIDE_FULL_EXIT"] = "1"
    cmd = [sys.executable, "-m", "stride", *args] if code is None else [sys.executable, "-c", code, *args]
    pipes: dict[str, object] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kw}
    return subprocess.run(cmd, text=True, cwd=ROOT, env=env, timeout=300, **pipes)  # type: ignore[call-overload]


# What a process leaves for its teardown: buffered writes in files never closed, a gzip and a zip writer never closed
# (trailer, central directory), a NamedTemporaryFile (removed at close), an atexit handler, a non-daemon thread still
# writing, stdout without a newline, a logging FileHandler; and an object whose __del__ says the teardown ran.
LEFT_OPEN = textwrap.dedent("""
    import atexit, gzip, logging, sys, tempfile, threading, time, zipfile
    out = sys.argv.pop(1)
    kept = open(out + "/kept.txt", "w")
    kept.write("last line, never flushed\\n")
    gz = gzip.open(out + "/kept.gz", "wt")
    gz.write("gzip body\\n")
    zf = zipfile.ZipFile(out + "/kept.zip", "w")
    zf.writestr("a.txt", "zip body")
    tmp = tempfile.NamedTemporaryFile(dir=out, prefix="tmp-", delete=True)
    log = logging.getLogger("t")
    log.addHandler(logging.FileHandler(out + "/log.txt"))
    log.warning("logged")

    def late():
        time.sleep(0.5)
        with open(out + "/thread.txt", "w") as f:
            f.write("thread done")
    threading.Thread(target=late).start()
    atexit.register(lambda: open(out + "/atexit.txt", "w").write("atexit ran"))

    class Teardown:
        def __del__(self):
            sys.__stderr__.write("teardown ran\\n")
    marker = Teardown()
    sys.stdout.write("no newline")
    from stride.cli.main import entry
    entry()
""")


@pytest.mark.parametrize("full", [False, True])
def test_files_atexit_threads_survive(tmp_path: Path, full: bool) -> None:
    out = tmp_path / ("full" if full else "fast")
    out.mkdir()
    r = run([str(out), "--version"], full=full, code=LEFT_OPEN)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("no newlinestride ")  # the script's write, then `--version`'s line
    assert (out / "kept.txt").read_text() == "last line, never flushed\n"
    assert gzip.decompress((out / "kept.gz").read_bytes()) == b"gzip body\n"  # the trailer was written
    with zipfile.ZipFile(out / "kept.zip") as z:
        assert z.read("a.txt") == b"zip body"  # the central directory was written
    assert not list(out.glob("tmp-*"))  # the temporary file was removed
    assert (out / "log.txt").read_text() == "logged\n"
    assert (out / "thread.txt").read_text() == "thread done"  # waited for, as the interpreter waits
    assert (out / "atexit.txt").read_text() == "atexit ran"
    # the mechanism: only the full shutdown frees every object (that is the time saved)
    assert ("teardown ran" in r.stderr) == full


def test_exit_codes_and_messages(tmp_path: Path) -> None:
    """Status and stderr as the interpreter gives them: 0, argparse's 2, a config error's 2, SystemExit(msg)'s 1."""
    assert run(["--help"]).returncode == 0
    for full in (False, True):
        bad = run(["nosuch"], full=full)
        assert bad.returncode == 2 and "invalid choice" in bad.stderr
        cfg = run(["train", str(QUICKSTART), "--set", "train.steps=zero", "--out", str(tmp_path / "run")],
                  full=full)
        assert cfg.returncode == 2 and "train.steps" in cfg.stderr and "Traceback" not in cfg.stderr, cfg.stderr
    for body, status, text in (("raise SystemExit('went wrong')", 1, "went wrong\n"), ("raise SystemExit(3)", 3, ""),
                               ("raise SystemExit(None)", 0, ""), ("return 7", 7, ""), ("return 256 + 5", 5, "")):
        code = f"import stride.cli.main as m\ndef f(argv=None):\n    {body}\nm.main = f\nm.entry()"
        fast, full = run([], code=code), run([], full=True, code=code)
        assert (fast.returncode, fast.stderr) == (full.returncode, full.stderr) == (status, text), body


def test_crash_keeps_traceback_and_status() -> None:
    """An uncaught exception is not the fast end's: traceback on stderr, status 1, atexit handlers still run."""
    code = textwrap.dedent("""
        import atexit, sys
        import stride.cli.main as m
        atexit.register(lambda: print("atexit ran", file=sys.stderr))
        def crash(argv=None):
            raise RuntimeError("boom")
        m.main = crash
        m.entry()
    """)
    r = run([], code=code)
    assert r.returncode == 1
    assert "Traceback" in r.stderr and "RuntimeError: boom" in r.stderr and "atexit ran" in r.stderr


def test_ctrl_c_is_130() -> None:
    """A SIGINT while the command runs: main's one line and 130, through the fast end."""
    code = textwrap.dedent("""
        import os, signal, sys, time
        import stride.cli.config as c
        def slow(args):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        c.register = lambda p: p.set_defaults(func=slow)
        from stride.cli.main import entry
        entry()
    """)
    r = run(["config"], code=code)
    assert r.returncode == 128 + signal.SIGINT and r.stderr == "stride config: stopped (interrupted)\n"


def test_main_in_a_callers_interpreter_returns() -> None:
    """`main([...])` returns its status to the caller, who goes on: the fast end is only the program's."""
    code = "from stride.cli.main import main\nprint('status', main(['--version']))\nprint('still here')"
    r = run([], code=code)
    assert r.returncode == 0 and r.stdout.splitlines()[1:] == ["status 0", "still here"]


def test_flush_failure_is_120() -> None:
    """stdout that cannot be flushed at the end (a full device): reported, status 120, as CPython does."""
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    code = textwrap.dedent("""
        import sys
        import stride.cli.main as m
        def left_in_the_buffer(argv=None):
            sys.stdout = open("/dev/full", "w")
            print("left in the buffer")
            return 0
        m.main = left_in_the_buffer
        m.entry()
    """)
    for full in (False, True):
        r = run([], full=full, code=code)
        assert r.returncode == 120 and "No space left on device" in r.stderr, (full, r.stderr)


def test_train_run_folder_complete(tmp_path: Path) -> None:
    """A real `python -m stride train` through the fast end: every record, TensorBoard's events and (installed)
    the MLflow run are on disk."""
    out = tmp_path / "run"
    mlflow = importlib.util.find_spec("mlflow") is not None
    r = run(["train", str(QUICKSTART), "--set", "train.steps=2", "--set", "metrics.log_every=1",
             "--set", "metrics.tensorboard=true", "--set", "metrics.flops=false", "--out", str(out),
             *(["--set", "metrics.mlflow=true"] if mlflow else [])])
    assert r.returncode == 0, r.stderr
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [rec["step"] for rec in records if "step" in rec and "loss" in rec][-1] == 2
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 2
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    loss_tags = [t for t in events.Tags()["scalars"] if "loss" in t]
    assert loss_tags and max(e.step for e in events.Scalars(loss_tags[0])) == 2
    if mlflow:  # the run is FINISHED (status 3) with both steps' losses, as after the interpreter's own end
        (meta,) = (out / "mlflow").glob("*/*/meta.yaml")
        assert "status: 3" in meta.read_text()
        assert len((meta.parent / "metrics" / "loss").read_text().splitlines()) == 2


TEARDOWN_MARK = ("import sys\nclass _Teardown:\n    def __del__(self):\n"
                 "        sys.__stderr__.write('teardown ran\\n')\n_mark = _Teardown()\n")


@pytest.mark.parametrize("how", ["console script", "python -m stride", "rank_entry", "cProfile", "python -i"])
def test_fast_end_only_at_the_process_top(tmp_path: Path, how: str) -> None:
    """The real entry points end fast; a tool that runs stride inside its own code and acts after it (cProfile
    writes its profile) and `python -i` get the interpreter's end. A sitecustomize object's __del__ says whether
    the teardown ran."""
    (tmp_path / "sitecustomize.py").write_text(TEARDOWN_MARK)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop("STRIDE_FULL_EXIT", None)
    prof = tmp_path / "out.prof"
    cmd = {"console script": [str(Path(sys.executable).with_name("stride")), "--version"],
           "python -m stride": [sys.executable, "-m", "stride", "--version"],
           "rank_entry": [sys.executable, "-m", "stride.bench.rank_entry", "--version"],
           "cProfile": [sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "stride", "--version"],
           "python -i": [sys.executable, "-i", "-m", "stride", "--version"]}[how]
    if not Path(cmd[0]).exists():
        pytest.skip("no stride console script beside this Python")
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, input="", timeout=300)
    assert r.returncode == 0 and "stride " in r.stdout, r.stderr
    fast = how in ("console script", "python -m stride", "rank_entry")
    assert ("teardown ran" in r.stderr) != fast, r.stderr
    if how == "cProfile":
        assert prof.stat().st_size > 0


def test_a_gzip_file_is_closed_before_its_own_write_buffer() -> None:
    """gzip's write buffer writes through a raw stream that refers back to its GzipFile (CPython 3.12, 3.13): the
    GzipFile counted as wrapped, tied with its buffer, and in whatever order gc listed them; closing the buffer first
    lost the trailer. The order is the wrapping's whatever order the objects come in (review of session 36's diff)."""
    import gzip
    import io as _io

    from stride.cli.process_exit import close_order

    g = gzip.GzipFile(fileobj=_io.BytesIO(), mode="wb")
    parts = [g] + [o for o in vars(g).values() if isinstance(o, _io.IOBase)]
    raw = getattr(getattr(g, "_buffer", None), "raw", None)
    if raw is not None:
        parts += [raw]
    for files in (parts, list(reversed(parts))):
        assert close_order(files)[0] is g
    g.close()
