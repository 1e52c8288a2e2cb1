"""Session-wide test set-up.

Triton kernels run under Triton's CPU interpreter when no CUDA GPU is present. `triton.jit` reads
TRITON_INTERPRET when it decorates a function, so this must be set before ANY test module imports a
kernel module, whichever directory pytest collects first: hence here, in the root conftest.
"""

import os
import random
import tempfile

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
# stride's per-host dtype probe (stride.metrics.dtype_speed) keeps its figures here, not in ~/.cache
os.environ.setdefault("STRIDE_CACHE_DIR", tempfile.mkdtemp(prefix="stride-test-cache-"))


@pytest.fixture
def seed() -> int:
    """A fresh seed each run; tests put it in their assert messages so a failure can be replayed."""
    s = random.SystemRandom().randrange(2**31)
    torch.manual_seed(s)
    return s
