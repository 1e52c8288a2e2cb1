"""The window copy in C (copy_kernel.c), built on first use with the host's C compiler, called by ctypes.

Why C: a batch of windows is B block copies, and nothing in numpy or torch copies a list of blocks
of an overlapping view into a buffer without per-item overhead: numpy's fancy index (the fallback)
holds the GIL for indexes of <= 500 items and allocates its own output, `torch.index_select` of an
overlapping view takes the element-wise TensorIterator path. The C loop is memcpy per window plus hints
for the page heads of the windows a few ahead (copy_kernel.c says what it measured); it fuses the
bf16 -> float32 upcast and the train normalisation into the copy (one pass, same bits), reads the
targets' price rows right after each window, and maps window ids to first rows (one call for
what took five numpy operations).

Built once per host and source: `cc -O3 -march=native -ffp-contract=off -shared` into the stride
cache folder ($STRIDE_CACHE_DIR/native, else ~/.cache/stride/native), named by a hash of the source,
the flags, the compiler and the CPU's feature flags, written under a tagged temporary name and
renamed (a reader sees a whole library or none). Where there is no compiler, or STRIDE_NATIVE=0,
`load()` returns None with the reason in `unavailable_reason()` and the gather uses numpy: the same
bytes, slower. A missing compiler or a failed build says so once a process (a RuntimeWarning naming
the reason); STRIDE_NATIVE=0 is the user's choice and says nothing.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import warnings
from pathlib import Path

from stride.files.owner import tagged_name
from stride.files.user_cache import user_cache_dir

SOURCE = Path(__file__).with_name("copy_kernel.c")
FLAGS = ["-O3", "-std=c11", "-fPIC", "-shared", "-ffp-contract=off", "-fno-fast-math"]
_I64, _P = ctypes.c_int64, ctypes.c_void_p


class Picks(ctypes.Structure):
    """copy_kernel.c's picks_t: each window's targets from m rows past its start (prices, or log prices)."""

    _fields_ = [("pbase", _P), ("pstride", _I64), ("m", _I64), ("offs", _P), ("bf16", ctypes.c_int), ("logp", _P),
                ("scale", _P)]


_PK = ctypes.POINTER(Picks)


class Gather(ctypes.Structure):
    """copy_kernel.c's gather_t: everything stride_gather_ids needs but the batch's ids and outputs."""

    _fields_ = [("base", _P), ("row_bytes", _I64), ("max_start", _I64), ("t", _I64), ("f", _I64),
                ("ahead", _I64), ("stream", _I64), ("lines", _I64), ("l2", _I64), ("convert", _I64),
                ("src_bf16", _I64), ("shift", _P), ("scale", _P), ("lo", _P), ("cum", _P), ("k", _I64),
                ("pk", _PK)]


_GP = ctypes.POINTER(Gather)
_SIGNATURES = {
    "stride_copy_windows": ([_P, _I64, _P, _I64, _I64, _I64, _P, _I64, ctypes.c_int, _PK, _P, ctypes.c_int], _I64),
    "stride_windows_f32": ([_P, ctypes.c_int, _P, _I64, _I64, _I64, _I64, _P, _P, _P, _I64, _PK, _P, ctypes.c_int,
                            ctypes.c_int],
                           _I64),
    "stride_log_returns": ([_P, _I64, _I64, _P, _P], None),
    "stride_pick_f64": ([_P, ctypes.c_int, _I64, _P, _I64, _P], None),
    "stride_gather_ids": ([_GP, _P, _I64, _I64, _I64, _P, _P], _I64),
}
_state: dict[str, object] = {}


def cache_dir() -> Path:
    return user_cache_dir() / "native"


def _compiler() -> str | None:
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return cc
    return None


def _cpu_flags() -> bytes:
    """The CPU's feature flags: a -march=native library must never be loaded on a CPU without them (a shared
    home folder seen from several hosts would otherwise hand one host's AVX-512 build to another)."""
    try:
        with open("/proc/cpuinfo", "rb") as f:
            return next((ln for ln in f if ln.startswith((b"flags", b"Features"))), b"")
    except OSError:
        return b""


def _build(cc: str) -> Path:
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    flags = [*FLAGS, "-march=native"]
    key = hashlib.sha256(SOURCE.read_bytes() + " ".join(flags).encode() + version.encode()
                         + os.uname().machine.encode() + _cpu_flags()).hexdigest()[:16]
    out = cache_dir() / f"copy_kernel-{key}.so"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(tagged_name("tmp", out.name))
    for attempt in (flags, FLAGS):  # -march=native is not known to every compiler
        r = subprocess.run([cc, *attempt, "-o", str(tmp), str(SOURCE)], capture_output=True, text=True, timeout=120)
        if r.returncode == 0:
            break
    else:
        tmp.unlink(missing_ok=True)
        raise OSError(f"{cc} failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
    os.replace(tmp, out)
    return out


def load() -> ctypes.CDLL | None:
    """The built library (its functions typed), or None where it cannot be built or is switched off."""
    if "lib" in _state:
        return _state["lib"]  # type: ignore[return-value]
    lib, reason = None, ""
    if os.environ.get("STRIDE_NATIVE", "1") == "0":
        reason = "switched off (STRIDE_NATIVE=0)"
    elif (cc := _compiler()) is None:
        reason = "no C compiler (cc, gcc or clang; or $CC)"
    else:
        try:
            lib = ctypes.CDLL(str(_build(cc)))  # CDLL: each call releases the GIL
            for name, (args, ret) in _SIGNATURES.items():
                fn = getattr(lib, name)
                fn.argtypes, fn.restype = args, ret
        except (OSError, subprocess.SubprocessError, AttributeError) as exc:
            lib, reason = None, f"could not be built or loaded: {exc}"
    _state["lib"], _state["reason"] = lib, reason
    if lib is None and not reason.startswith("switched off"):
        warnings.warn(f"stride: the C window copy is unavailable ({reason}); the data loader copies with numpy "
                      "instead (the same batches, slower). STRIDE_NATIVE=0 silences this.", RuntimeWarning,
                      stacklevel=2)
    return lib


def unavailable_reason() -> str:
    """Why `load()` returned None ('' when it did not)."""
    load()
    return str(_state.get("reason", ""))
