"""Peak memory: the CUDA caching allocator's peak on GPU, process peak RSS on CPU; and activation bytes.

CPU has no allocator statistics, so peak RSS is the honest figure. It is a process-lifetime high-water
mark unless reset: on Linux `reset_peak` resets it (writing 5 to /proc/self/clear_refs, proc(5)) so that
a run's figure is its own, not that of an earlier run in the same process (a `stride bench` suite or
sweep trains every workload and variant in one process). `SavedActivations` adds a precise,
device-independent count of what autograd keeps for backward.
"""

from __future__ import annotations

import contextlib
import ctypes
import resource
import sys

import torch

_CLEAR_REFS = "/proc/self/clear_refs"
_STATUS = "/proc/self/status"


def reset_peak(device: torch.device) -> None:
    """Start a new peak: the allocator's on CUDA; on Linux CPU the process's RSS high-water mark (VmHWM)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    elif sys.platform.startswith("linux"):
        _trim_heap()
        try:
            with open(_CLEAR_REFS, "w") as f:
                f.write("5")  # reset the peak RSS to the current RSS (Linux >= 4.0)
        except OSError:
            pass  # not allowed here (a locked-down container): the figure stays the lifetime peak


def _trim_heap() -> None:
    """Hand the C heap's free pages back to the kernel (glibc's malloc_trim) before a new peak starts.

    Without it the pages an earlier run freed stay resident and the next run's peak starts from them
    (stride bench, AMD EPYC: mlp_tiny after the tiny transformer started at 452 MiB, trimmed 390 MiB).
    """
    with contextlib.suppress(OSError, AttributeError):  # not glibc (musl): nothing to trim this way
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _vm_hwm() -> int | None:
    """The process's peak RSS in bytes from /proc/self/status (resettable, unlike getrusage's ru_maxrss,
    which keeps the peak of any thread that exited since), or None where there is no such file."""
    try:
        with open(_STATUS) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def peak_memory(device: torch.device) -> tuple[int, str]:
    """(bytes, kind) where kind is 'cuda_max_allocated' or 'process_peak_rss'."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device)), "cuda_max_allocated"
    hwm = _vm_hwm() if sys.platform.startswith("linux") else None
    if hwm is not None:
        return hwm, "process_peak_rss"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024), "process_peak_rss"


class SavedActivations:
    """Context manager that sums the bytes of distinct storages autograd saves for backward: activations.

    Weights are not activations, and autograd often saves them through a view (a Linear saves `weight.t()`, a
    plain tensor whose storage is the parameter's): a view of an `nn.Parameter` is skipped, and with `model` every
    storage of its parameters and buffers (RoPE tables, running statistics) is too. Counting them made a
    Linear stack at batch 1 report its 4 MB of weights as 4 MB of activations, and `grad_accum4`'s activation
    ratio read 0.43x where the activations were 1/4."""

    def __init__(self, model: torch.nn.Module | None = None) -> None:
        self.bytes = 0
        self._seen: set[int] = set()
        for t in (*model.parameters(), *model.buffers()) if model is not None else ():
            with contextlib.suppress(RuntimeError, NotImplementedError):  # a sharded DTensor has no storage of its own
                if t.untyped_storage().nbytes():
                    self._seen.add(t.untyped_storage().data_ptr())
        self._ctx = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        if isinstance(t, torch.Tensor) and not isinstance(t, torch.nn.Parameter) \
                and not isinstance(t._base, torch.nn.Parameter):
            st = t.untyped_storage()
            key = st.data_ptr()
            if key not in self._seen:
                self._seen.add(key)
                self.bytes += st.nbytes()
        return t

    def __enter__(self) -> SavedActivations:
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._ctx.__exit__(*exc)
