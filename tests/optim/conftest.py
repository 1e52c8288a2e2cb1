"""Run the Triton optimizer kernels under Triton's CPU interpreter when no CUDA GPU is present.

This must happen before any kernel module is imported: `triton.jit` reads TRITON_INTERPRET when it
decorates a function. stride imports its Triton modules lazily (at the first Triton call), so setting
it here, at collection time, is early enough.
"""

import os
import random

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture
def seed() -> int:
    """A fresh seed each run; tests put it in their assert messages so a failure can be replayed."""
    s = random.SystemRandom().randrange(2**31)
    torch.manual_seed(s)
    return s
