"""Name and category rules: which events are device work, which are communication, memory or compute.

The kernel-name patterns follow Holistic Trace Analysis' published grouping (communication: names
starting `nccl`/`hip`/`hccl` or containing `ncclKernel`; memory: `Memcpy`/`Memset`/`dma`; compute:
everything not matching its exclusion list), so that `--hta-compatible` agrees with it; the host-side
collective names (`gloo:all_reduce`, `c10d::allreduce_`, `nccl:all_to_all`) are stride's own rule for
CPU-only traces, where the collective runs on a host thread.
"""

from __future__ import annotations

import re

# Categories of events that run on an accelerator (Kineto names, old and new).
DEVICE_CATS = frozenset(
    {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset", "cuda_sync", "mtia_ccp_events"}
)
MEMORY_CATS = frozenset({"gpu_memcpy", "Memcpy", "gpu_memset", "Memset"})
# Categories of host events kept: operators, annotations, runtime/driver calls (kernel launches).
HOST_CATS = frozenset({"cpu_op", "Operator", "user_annotation", "cuda_runtime", "Runtime", "cuda_driver", "hip_runtime",
                       "mtia_runtime", "xpu_runtime", "privateuse1_runtime"})
RUNTIME_CATS = frozenset({"cuda_runtime", "Runtime", "cuda_driver", "hip_runtime", "mtia_runtime", "xpu_runtime",
                          "privateuse1_runtime"})
OPERATOR_CATS = frozenset({"cpu_op", "Operator"})
ANNOTATION_CATS = frozenset({"user_annotation"})

_COMM_KERNEL = re.compile(r"(^nccl.*)|(^hip)|(^hccl)|(.*ncclKernel.*)")
_MEMORY_KERNEL = re.compile(r"(^(hip)?Memcpy)|(^(hip)?Memset)|(^dma)")
_NOT_COMPUTE = re.compile(
    r"(^nccl)|(.*Memcpy)|(.*Memset)|(.*dma)|(^.*Sync)|(^Stream Wait Event)|(cuda.*LaunchKernel)|(^runFunction)"
    r"|(^hip)|(^job_exe)|(^packet)|(^pe_exe)|(^cpum_exe_subgraph)|(^hccl)|(^collective_subgraph_execution)"
)
# Host-side collectives: the record_function names c10d and its backends emit.
_HOST_COMM = re.compile(r"^(gloo|nccl|rccl|hccl|mpi|ucc|xccl):|^c10d::|^record_param_comms$")
PROFILER_STEP = re.compile(r"^ProfilerStep\s*#\s*(\d+)")

COMPUTE, COMM, MEMORY, OTHER = 0, 1, 2, 3
KIND_NAMES = ("compute", "communication", "memory", "other")


def device_kind(name: str) -> int:
    """HTA's kernel type of a device event, by name alone: COMM, MEMORY, COMPUTE or OTHER."""
    if _COMM_KERNEL.match(name):
        return COMM
    if _MEMORY_KERNEL.match(name):
        return MEMORY
    if not _NOT_COMPUTE.match(name):
        return COMPUTE
    return OTHER


def is_host_comm(name: str) -> bool:
    """A host event that is a collective (gloo work on its own thread, or a c10d call)."""
    return _HOST_COMM.match(name) is not None


def step_number(name: str) -> int | None:
    m = PROFILER_STEP.match(name)
    return int(m.group(1)) if m else None


def annotation_label(name: str) -> str:
    """`## forward ##` -> `forward`; other names unchanged."""
    s = name.strip()
    if s.startswith("##") and s.endswith("##") and len(s) > 4:
        return s[2:-2].strip()
    return s
