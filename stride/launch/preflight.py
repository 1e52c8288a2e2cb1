"""The layout checks every rank would run, run once in the process that launches them.

The checks that need the model (heads and hidden sizes vs `tp`, layers and microbatches vs `pp`) would
otherwise run in every rank, so N processes would start and each print the same error. Here they run
once, before anything is launched.

The model is built on the meta device: shapes and module structure, no memory and no initialisation,
so the cost does not grow with the model. Measured (load 5-10): the whole check for tp=2 or pp=2 takes
1.3-1.7 s, of which 0.2 s builds the synthetic data (for the feature count; a bad `[data]` fails here
once, too) and most of the rest is a one-time import of torch's Python meta kernels. On CPU the tiny
model builds in 0.01 s, but a 25M-parameter one takes 0.45 s and 100 MB, and it grows with the model:
a 7B model would need 28 GB in the launching process. The model is built only when a check reads it
(`tp` > 1 or `pp` > 1): a DDP or FSDP launch checks degrees and batch in under 1 ms.
"""

from __future__ import annotations

import torch
from torch import nn

from stride.config.errors import ConfigError
from stride.config.schema import RunConfig
from stride.parallel.layout import Layout, check_batch, check_layout, check_precision, resolve_layout
from stride.parallel.pipeline_plan import PipelinePlan


def model_for_checks(cfg: RunConfig) -> nn.Module:
    """The configured model's structure (meta tensors), built from the data's shapes as a rank builds it."""
    return _model_and_batch(cfg, batch=False)[0]


def _model_and_batch(cfg: RunConfig, batch: bool) -> tuple[nn.Module, torch.Tensor | None]:
    """The model for the checks and, with `batch`, one global batch's inputs (None where the data yields none)."""
    from stride.data.build import build_data
    from stride.models.registry import build_model
    from stride.models.size import on_meta

    bundle = build_data(cfg.data, cfg.train.batch_size, validation=cfg.train.validates)  # a bad [data] fails here
    args = (cfg.model, bundle.n_features, bundle.seq_len, bundle.n_horizons)
    x = None
    if batch:  # only the pipeline check reads it
        try:
            x = next(iter(bundle.train))[0]
        except Exception:  # nothing to learn here about the layout; the ranks will say what is wrong with the data
            x = None
    try:
        with on_meta():
            return build_model(*args), x
    except ConfigError:
        raise
    except Exception:  # a `module:factory` model that computes with tensor values while it is built
        return build_model(*args), x


def _check_stage_chain(model: nn.Module, plan: PipelinePlan, x: torch.Tensor | None, cfg: RunConfig,
                       dp: int) -> None:
    """Chain the pipeline stages on one meta microbatch, as every rank does on a real one (`chain_stages`): a
    model whose forward cannot run as stages (an MLP without skips for the parts a stage drops) fails here, once,
    with the ranks' message (exit 2), instead of in every rank and then in torchrun's traceback (audit 6). Only
    the refusal is taken from here: a forward that meta tensors cannot run is left to the ranks."""
    from stride.parallel.pipeline import chain_stages

    if x is None or not all(p.is_meta for p in model.parameters()):
        return  # a model built with real tensors: its forward would cost what a rank's does
    mb = max(1, cfg.train.batch_size // dp // plan.n_microbatches)  # as a rank splits its batch (grad_accum is in)
    xm = torch.empty((mb, *x.shape[1:]), dtype=x.dtype, device="meta")
    try:
        chain_stages(model, plan, xm)
    except ConfigError:
        raise
    except Exception:
        return


def check_backend(cfg: RunConfig) -> None:
    """`parallel.backend` against the device the ranks on this host resolve (`nccl` on a CPU run): it was checked
    only in the ranks, so `--nproc 2` started two, each printed the refusal, and torchrun its failed-child report."""
    from stride.parallel.mesh import choose_backend
    from stride.train.device import resolve_device

    choose_backend(cfg.parallel.backend, resolve_device(cfg.train.device))


def check_before_launch(cfg: RunConfig, world_size: int, *, model_here: bool = True,
                        ranks_here: bool = False) -> Layout:
    """Raise the ConfigError a rank would raise for this layout at `world_size` processes, or return the layout.

    `model_here=False`: the data or the model exist only where the job runs (a store or a `module:factory` inside
    a Kubernetes pod's image), so the checks that read the model are left to the ranks; degrees, batch and precision
    still run. `ranks_here`: the ranks run on this host (`stride train --nproc`), so `parallel.backend` is checked
    against its device; not for `stride launch`, whose job may run on GPUs a login node lacks.
    """
    layout = resolve_layout(cfg.parallel, world_size)
    if ranks_here:  # a backend the ranks' device cannot take was refused by each of them, after the launch
        check_backend(cfg)
    if not model_here and (layout.tp > 1 or layout.pp > 1):
        check_batch(layout, cfg.train.batch_size, cfg.train.grad_accum)
        # reads no model: a precision every rank would refuse (fp16 with tp > 1) must not wait for the pods
        check_precision(layout, cfg.train.precision, cfg.parallel.mp_param_dtype)
        return layout
    # check_model and check_pipeline read the model only for tp > 1 / pp > 1: otherwise an empty module stands in
    model, x = _model_and_batch(cfg, layout.pp > 1) if layout.tp > 1 or layout.pp > 1 else (nn.Module(), None)
    layout, plan = check_layout(cfg, model, world_size, cfg.data.seq_len // cfg.model.patch_len)
    if plan is not None:
        _check_stage_chain(model, plan, x, cfg, layout.dp)
    return layout
