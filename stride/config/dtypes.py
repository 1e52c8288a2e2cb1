"""The torch dtype of each precision name a config holds (`train.precision`, `parallel.mp_param_dtype`).

One table for the trainer's autocast, the FSDP2 mixed-precision policy, the MFU peak's matmul and
the operator census. Kept out of `stride.config`'s package import so reading a config needs no torch.
"""

from __future__ import annotations

import torch

PRECISION_DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
