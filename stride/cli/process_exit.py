"""The end of a `stride` process: everything the interpreter's exit guarantees, without its 0.7-2 s of teardown.

A process that imported the trainer holds ~345k objects (torch, sympy, triton); after the command's work is done,
CPython's shutdown spends 0.73-0.81 s (1.4-2.7 s on a busy host; 2-core Zen 5) clearing modules and freeing them one
by one, which nothing needs: the operating system takes the memory back at once. `end_process` does, in the
interpreter's order, what a user can observe of that shutdown, then `os._exit`:

1. waits for the non-daemon threads and runs threading's exit hooks (concurrent.futures pools): `threading._shutdown`;
2. runs the atexit handlers (logging.shutdown, multiprocessing's, MLflow's and W&B's, stride's own);
3. flushes sys.stdout and sys.stderr: a failed flush is reported and the status is 120, as CPython's;
4. closes every file object still open for writing, wrappers before what they wrap (a TextIOWrapper before its
   buffer, a GzipFile or ZipFile before its file), as freeing them at teardown would: buffered writes land, a gzip
   trailer or a zip directory is written, a NamedTemporaryFile is removed; then C stdio's buffers (`fflush(NULL)`).

It is only for the process's own entry points (`stride`, `python -m stride`, a rank of `stride.bench.rank_entry`),
called from the process's top (`process_top`: not under cProfile, coverage, pdb or `python -i`), never for
`main([...])` called in a caller's interpreter (tests, a user's script). An uncaught exception is not
handled here: it ends the process the usual way (traceback, status 1, full shutdown). `STRIDE_FULL_EXIT=1` turns the
fast end off: the interpreter's own shutdown runs, as before.
"""

from __future__ import annotations

import contextlib
import gc
import io
import itertools
import os
import sys
import threading
import traceback
from collections.abc import Callable
from types import FrameType
from typing import NoReturn

FULL_EXIT_ENV = "STRIDE_FULL_EXIT"  # "1": end through the interpreter's full shutdown (slower, same outcome)
FLUSH_FAILED = 120  # CPython's status when flushing stdout/stderr at exit fails


def end_process(run: Callable[[], int | None]) -> NoReturn:
    """Call `run` (a command's main) and end the process with its status: `run`'s return value or the code of the
    SystemExit it raised (None: 0; a message: printed to stderr, 1). Other exceptions propagate unchanged. Called
    by stride.cli.main.entry from the process's top (`process_top`); anywhere else, under `python -i`, or with
    STRIDE_FULL_EXIT=1 it raises SystemExit(status) instead, for the interpreter's own end."""
    try:
        top = process_top(sys._getframe(2))  # end_process <- entry <- the code that called entry
    except ValueError:  # a shallower stack: not called through entry
        top = False
    try:
        code = run()
    except SystemExit as exc:
        code = exc.code
    if not top or sys.flags.inspect or os.environ.get(FULL_EXIT_ENV, "") not in ("", "0"):
        raise SystemExit(code)  # the interpreter's own end, as before
    fast_exit(exit_status(code))


def process_top(frame: FrameType | None) -> bool:
    """Whether `frame` is the process's own top: a script's or `python -m`'s module code with nothing above it but
    runpy. Not when a tool runs stride inside its own code and acts after it (`python -m cProfile -m stride` writes
    its profile, `coverage run` saves its data, `pdb` stops at the end): those keep the interpreter's end."""
    if frame is None or frame.f_code.co_name != "<module>":
        return False
    outer = frame.f_back
    while outer is not None:
        code = outer.f_code
        if code.co_name not in ("_run_code", "_run_module_as_main") or "runpy" not in code.co_filename:
            return False
        outer = outer.f_back
    return True


def exit_status(code: object) -> int:
    """The status CPython gives `SystemExit(code)`: None is 0, an int itself, anything else is printed to stderr
    and is 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    with contextlib.suppress(Exception):  # a closed stderr: the status still says it failed
        print(code, file=sys.stderr)
    return 1


def fast_exit(status: int) -> NoReturn:
    """End the process with `status` after what the interpreter's shutdown would do that anyone can see (module
    docstring): threads, atexit handlers, the standard streams, open files; not the freeing of every object."""
    _shutdown_threads()
    _run_atexit()
    if not _flush_std_streams():
        status = FLUSH_FAILED
    try:
        close_open_files()
    except BaseException:  # noqa: BLE001  (Ctrl-C during the scan: reported, and the status stands)
        _report("the files left open")
    _flush_c_stdio()
    os._exit(status & 0xFF)  # what exit() makes of it: -1 is 255, 256 is 0


def _report(what: str) -> None:
    """An error during the process's end: printed as CPython prints one at its shutdown, and ignored."""
    try:
        print(f"Exception ignored in: {what}", file=sys.stderr)
        traceback.print_exc()
        sys.stderr.flush()
    except Exception:  # noqa: BLE001  (stderr itself is gone: nothing left to tell)
        pass


def _shutdown_threads() -> None:
    """Wait for every non-daemon thread and run threading's own exit hooks, as Py_Finalize does first."""
    shutdown = getattr(threading, "_shutdown", None)
    try:
        if shutdown is not None:
            shutdown()
        else:  # not CPython 3.8-3.13's threading: join the threads ourselves
            for t in threading.enumerate():
                if t is not threading.current_thread() and not t.daemon:
                    t.join()
    except BaseException:  # noqa: BLE001  (Ctrl-C while waiting: CPython reports it and goes on)
        _report(repr(threading))


def _run_atexit() -> None:
    """The atexit handlers, last registered first; each failure is printed by atexit itself and the rest run."""
    import atexit

    try:
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        _report("atexit")


def _flush_std_streams() -> bool:
    """Flush sys.stdout and sys.stderr; False where one failed (it is reported, as CPython does)."""
    ok = True
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name, None)
        if stream is None or getattr(stream, "closed", False):
            continue
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            ok = False
            _report(f"<_io.TextIOWrapper name='<{name}>'>")
    return ok


def _completes_a_file(kind: type) -> bool:
    """Whether an open object of this type may hold what only its close writes (buffered bytes, a gzip trailer, a
    zip directory) or undoes (a temporary file's name)."""
    if issubclass(kind, io.IOBase):
        return True
    mod = sys.modules.get(kind.__module__)
    return (kind.__module__ == "zipfile" and kind.__name__ == "ZipFile") or (
        kind.__module__ == "tempfile" and mod is not None and kind is getattr(mod, "_TemporaryFileWrapper", None))


def _open_for_writing(obj: object) -> bool:
    if isinstance(obj, io.IOBase):
        return not obj.closed and obj.writable()
    if type(obj).__name__ == "ZipFile":
        return getattr(obj, "fp", None) is not None and getattr(obj, "mode", "r") != "r"
    return not getattr(obj, "closed", True)  # tempfile's wrapper: removed at close even when opened to read


def close_open_files() -> int:
    """Close every file object open for writing, outer wrappers first, except the standard streams (flushed only);
    how many were closed. What their close writes or removes happens as at teardown, when they are freed."""
    # ~350k objects after a training run, scattered in memory: each is touched once (its type), in C, not in a loop
    objects = gc.get_objects()
    types = list(map(type, objects))
    kinds = {kind for kind in set(types) if _completes_a_file(kind)}
    found = list(itertools.compress(objects, map(kinds.__contains__, types)))
    del objects, types
    std = {id(s) for s in (sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__)
           if s is not None}
    for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):  # and the layers below them
        for layer in (getattr(s, "buffer", None), getattr(getattr(s, "buffer", None), "raw", None)):
            if layer is not None:
                std.add(id(layer))
    files = []
    for obj in found:
        try:
            if id(obj) in std or not _open_for_writing(obj):
                continue
            if _fileno(obj) in (0, 1, 2):  # another writer over a standard stream: its bytes, not its closing
                obj.flush()  # type: ignore[attr-defined]
                continue
            files.append(obj)
        except Exception:  # noqa: BLE001  (a half-built or broken file object: teardown would skip it too)
            continue
    closed = 0
    for f in close_order(files):
        try:
            if isinstance(f, io.IOBase) and f.closed:  # closed with the wrapper closed before it
                continue
            f.close()  # type: ignore[attr-defined]
            closed += 1
        except Exception:  # noqa: BLE001  (a disk full at the last write: said, as CPython says it at teardown)
            _report(repr(f))
    return closed


_LAYER = {io.TextIOBase: 0, io.BufferedIOBase: 1, io.RawIOBase: 2}  # text wraps buffered wraps raw


def _depth(f: object) -> int:
    return next((d for k, d in _LAYER.items() if isinstance(f, k)), 0)  # a ZipFile or temp-file wrapper: outermost


def close_order(files: list[object]) -> list[object]:
    """`files` in the order to close them: each before what it wraps (the file objects it refers to, directly or
    through its instance dict), then by layer (text, buffered, raw). A reference from a lower layer up to a higher one
    is a call-back, not a wrapping: gzip's _WriteBufferStream (raw) refers to its GzipFile (buffered), which made the
    GzipFile count as wrapped, tied with its own write buffer; closing the buffer first lost the gzip trailer
    (CPython 3.12 and 3.13 hold that reference; review of session 36's diff)."""
    ids = {id(f) for f in files}
    inner: set[int] = set()
    for f in files:
        depth = _depth(f)
        refs = []
        for ref in gc.get_referents(f):
            if id(ref) in ids:
                refs.append(ref)
            elif isinstance(ref, dict):
                refs.extend(v for v in ref.values() if id(v) in ids)
        inner.update(id(r) for r in refs if _depth(r) >= depth)
    return sorted(files, key=lambda f: (id(f) in inner, _depth(f)))


def _fileno(obj: object) -> int | None:
    try:
        return obj.fileno()  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001  (no descriptor: a BytesIO, a zip or gzip writer over another object)
        return None


def _flush_c_stdio() -> None:
    """Flush C's stdio buffers (what an extension printf'd), which exit() flushes and os._exit does not."""
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except Exception:  # noqa: BLE001  (no C library to load: nothing buffered there to lose)
        pass
