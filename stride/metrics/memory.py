"""Peak memory: the CUDA caching allocator's peak on GPU, process peak RSS on CPU; and activation bytes.

CPU has no allocator statistics, so RSS (a process-lifetime high-water mark) is the honest figure;
`SavedActivations` adds a precise, device-independent count of what autograd keeps for backward.
"""

from __future__ import annotations

import resource
import sys

import torch


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device: torch.device) -> tuple[int, str]:
    """(bytes, kind) where kind is 'cuda_max_allocated' or 'process_peak_rss'."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device)), "cuda_max_allocated"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024), "process_peak_rss"


class SavedActivations:
    """Context manager that sums the bytes of distinct storages autograd saves for backward."""

    def __init__(self) -> None:
        self.bytes = 0
        self._seen: set[int] = set()
        self._ctx = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        if isinstance(t, torch.Tensor) and not isinstance(t, torch.nn.Parameter):
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
