"""torch.compile's CPU code cache, one folder per instruction set.

Why: torch 2.13's inductor caches compiled CPU kernels under a key that leaves out the vector instruction set they
were compiled for. Measured on an Intel Xeon (AVX-512 with AMX, torch 2.13.0): an RMSNorm on a 7 x 33 tensor,
compiled into a fresh cache folder, then compiled again in a new process with `ATEN_CPU_CAPABILITY=avx2` (what an
AVX2-only host, an AMD EPYC of Zen 2 or 3, runs) loaded the AVX-512 entry and was off by 3.2 (max abs; 4.8e-7 from
an empty folder); in the other order the process died ("double free or corruption"), and `default` then `avx2`
gave NaN. So a cache folder shared by two kinds of host (a network home, a shared TORCHINDUCTOR_CACHE_DIR, a
container image baked on another machine) returns wrong numbers silently; `make test` under ATEN_CPU_CAPABILITY=avx2
with the folder this host had filled had 5 failures and 19 errors (compiled steps off, a pipeline run diverged),
all gone with an empty folder. Every compile stride applies (train.apply, the optimizer step, the pipeline's blocks,
the "compile" kernel set) first moves the cache to a subfolder named by the instruction set: the cost is one cold
compile per instruction set a folder serves.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform

ENV = "TORCHINDUCTOR_CACHE_DIR"
# the /proc/cpuinfo flags that decide which vector code inductor emits (x86 and Arm)
_FLAGS = ("avx512", "amx", "avx2", "avx_vnni", "fma", "f16c", "sve", "asimd", "bf16", "i8mm")


@functools.cache  # ATen reads its capability once a process; the CPU does not change under it
def isa_key() -> str:
    """`cpu-<ATen capability>-<hash of the vector flags>`: equal on hosts that run the same compiled CPU code."""
    import torch

    capability = torch.backends.cpu.get_cpu_capability().lower()
    flags = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    flags = " ".join(sorted({w for w in line.split(":", 1)[1].split() if w.startswith(_FLAGS)}))
                    break
    except OSError:  # not Linux: the processor's name stands in for its flags
        flags = platform.processor()
    digest = hashlib.sha1(f"{platform.machine()} {flags}".encode()).hexdigest()[:10]
    return f"cpu-{capability}-{digest}"


def isolate_inductor_cache() -> str:
    """Point inductor's cache at the subfolder of this instruction set (under the folder the user set, or torch's
    default) and return it. Idempotent; a child process (torchrun's ranks) inherits the setting, and a folder set
    for another instruction set (a parent run under another ATEN_CPU_CAPABILITY) is moved to this one's."""
    key = isa_key()
    base = os.environ.get(ENV)
    if base is None:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        base = default_cache_dir()
    base = os.path.abspath(base)
    if os.path.basename(base).startswith("cpu-"):
        if os.path.basename(base) == key:
            return base
        base = os.path.dirname(base)
    path = os.path.join(base, key)
    os.environ[ENV] = path
    return path
