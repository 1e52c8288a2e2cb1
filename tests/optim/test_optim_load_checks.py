"""Outside audit (kernels/optim): loaded state is checked against its parameters before anything reaches a step or a
kernel; every param group's hyperparameters get the constructor's checks; AdamW8bit refuses betas whose stored
normalised update is unbounded; Adafactor's own hyperparameters are checked."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from stride.optim.adafactor import Adafactor
from stride.optim.adamw8bit import AdamW8bit
from stride.optim.adamw_fused_triton import FusedAdamW


def _trained(make, shapes: list[tuple[int, ...]], dtype: torch.dtype = torch.float32) -> dict:  # noqa: ANN001
    g = torch.Generator().manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(s, generator=g).to(dtype)) for s in shapes]
    opt = make(ps)
    for _ in range(2):
        for p in ps:
            p.grad = torch.randn(p.shape, generator=g).to(dtype)
        opt.step()
    return copy.deepcopy(opt.state_dict())


def _fresh(make, shapes: list[tuple[int, ...]], dtype: torch.dtype = torch.float32):  # noqa: ANN001, ANN202
    ps = [torch.nn.Parameter(torch.randn(s).to(dtype)) for s in shapes]
    return ps, make(ps)


# -- 1, 2: state of other parameters ------------------------------------------------------------------------------

@pytest.mark.parametrize("impl", ["torch", "triton"])
@pytest.mark.parametrize(("src", "dst"), [(5000, 9000), (9000, 5000), (5000, 6000)])
def test_adamw8bit_refuses_codes_of_another_block_count(impl: str, src: int, dst: int) -> None:
    """Was: accepted; the Triton step then wrote 36 blocks into 20-block buffers (munmap_chunk / segfault), the torch
    step raised a size mismatch or (9000 -> 5000) silently used the first 20 blocks of a larger parameter's state."""
    sd = _trained(lambda ps: AdamW8bit(ps, impl=impl), [(src,)])
    ps, opt = _fresh(lambda ps: AdamW8bit(ps, impl=impl), [(dst,)])
    blocks = (-(-src // 256), -(-dst // 256))
    with pytest.raises(ValueError, match=rf"parameter 0 \(group 0, position 0, shape \({dst},\)\): state "
                                         rf"'exp_avg_normed_codes' has shape \({blocks[0]}, 256\), expected "
                                         rf"\({blocks[1]}, 256\)"):
        opt.load_state_dict(sd)
    assert not opt.state  # nothing was stored


def test_adamw8bit_names_the_group_and_position_of_a_bad_state() -> None:
    make = lambda ps: AdamW8bit([{"params": ps[:1]}, {"params": ps[1:]}])  # noqa: E731
    sd = _trained(make, [(7,), (5000,), (4096,)])
    sd["state"][2]["exp_avg_sqrt_grid_bounds"] = torch.zeros(16, 3, dtype=torch.bfloat16)
    _, opt = _fresh(make, [(7,), (5000,), (4096,)])
    with pytest.raises(ValueError, match=r"parameter 2 \(group 1, position 1, shape \(4096,\)\): state "
                                         r"'exp_avg_sqrt_grid_bounds' has shape \(16, 3\), expected \(16, 2\)"):
        opt.load_state_dict(sd)
    sd["state"][2]["exp_avg_sqrt_grid_bounds"] = torch.zeros(16, 2, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"'exp_avg_sqrt_grid_bounds' is torch.float16, expected torch.bfloat16"):
        opt.load_state_dict(sd)
    sd["state"][0]["exp_avg"] = torch.zeros(8)
    with pytest.raises(ValueError, match=r"parameter 0 \(group 0, position 0, shape \(7,\)\): state 'exp_avg' has "
                                         r"shape \(8,\), expected \(7,\)"):
        opt.load_state_dict(sd)


@pytest.mark.parametrize(("src", "dst"), [(5000, 100), (100, 5000)])
def test_adamw8bit_refuses_the_other_kind_of_state(src: int, dst: int) -> None:
    sd = _trained(AdamW8bit, [(src,)])
    _, opt = _fresh(AdamW8bit, [(dst,)])
    with pytest.raises(ValueError, match=r"has state keys .* AdamW8bit keeps .* min_8bit_size=4096"):
        opt.load_state_dict(sd)


def test_the_8bit_kernel_refuses_buffers_of_another_size() -> None:
    """The last guard: state changed after loading never reaches the kernel with short buffers."""
    from stride.optim.adamw8bit_codes import zero_q8_state
    from stride.optim.triton_adamw8bit_kernel import adamw8bit_multi_tensor

    p = torch.zeros(9000)
    with pytest.raises(ValueError, match=r"tensor 0: .* exp_avg_normed_codes \(20, 256\) torch.int8"):
        adamw8bit_multi_tensor([p], [p.clone()], [zero_q8_state(20, "cpu")], lr=1e-3, beta1=0.9, beta2=0.999,
                               eps=1e-8, weight_decay=0.0, step=1)


@pytest.mark.parametrize(("src", "dst", "key", "got", "want"), [
    ((5000,), (6000,), "exp_avg_sq", "(5000,)", "(6000,)"),
    ((40, 30), (30, 40), "row_sq", "(40,)", "(30,)"),
    ((900,), (30, 30), None, None, None),
])
def test_adafactor_refuses_state_of_other_shapes(src, dst, key, got, want) -> None:  # noqa: ANN001
    """Was: accepted, and the step failed with a raw size mismatch (or, transposed, silently mixed rows)."""
    sd = _trained(Adafactor, [src])
    ps, opt = _fresh(Adafactor, [dst])
    match = (rf"shape \({dst[0]},\)\): state '{key}' has shape \{got[:-2]},\), expected \{want[:-2]},\)" if key
             else r"has state keys \['exp_avg', 'exp_avg_sq', 'step'\]; Adafactor keeps \['col_sq', 'exp_avg', "
                  r"'row_sq', 'step'\]")
    if key == "row_sq":
        match = r"shape \(30, 40\)\): state 'row_sq' has shape \(40,\), expected \(30,\)"
    with pytest.raises(ValueError, match=match):
        opt.load_state_dict(sd)


def test_own_state_still_round_trips_exactly() -> None:
    for make in (AdamW8bit, Adafactor, FusedAdamW):
        shapes = [(5000,), (40, 30), (7,)]
        sd = _trained(make, shapes, torch.bfloat16)
        ps, opt = _fresh(make, shapes, torch.bfloat16)
        opt.load_state_dict(sd)
        for i, p in enumerate(ps):
            for k, v in sd["state"][i].items():
                assert opt.state[p][k].dtype == v.dtype and torch.equal(opt.state[p][k], v), (make, k)


# -- 3: another optimizer's state dict -----------------------------------------------------------------------------

OPTS = {"torch AdamW": torch.optim.AdamW, "FusedAdamW": FusedAdamW, "AdamW8bit": AdamW8bit, "Adafactor": Adafactor}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("src", "dst", "match"), [
    ("torch AdamW", "AdamW8bit", r"param group 0 of the state dict lacks \['min_8bit_size'\]"),
    ("FusedAdamW", "AdamW8bit", r"param group 0 of the state dict lacks \['min_8bit_size'\]"),
    ("Adafactor", "AdamW8bit", r"param group 0 of the state dict lacks \['min_8bit_size'\]"),
    ("torch AdamW", "Adafactor", r"lacks \['clip_threshold', 'momentum_dtype'\]"),
    ("FusedAdamW", "Adafactor", r"lacks \['clip_threshold', 'momentum_dtype'\]"),
    ("AdamW8bit", "Adafactor", r"lacks \['clip_threshold', 'momentum_dtype'\]"),
    ("Adafactor", "FusedAdamW", r"has \['clip_threshold', 'momentum_dtype'\]"),
    ("AdamW8bit", "FusedAdamW", r"parameter 0 \(group 0, position 0, shape \(5000,\)\) has state keys "
                                r"\['exp_avg_normed_codes', .*; FusedAdamW keeps \['exp_avg', 'exp_avg_sq', 'step'\]"),
])
def test_another_optimizers_state_is_refused_on_load_naming_the_keys(src: str, dst: str, match: str,
                                                                     dtype: torch.dtype) -> None:
    """Was: KeyErrors at the first step, a dtype error (bf16 torch AdamW -> AdamW8bit), or (fp32 torch AdamW ->
    AdamW8bit) accepted with fp32 moments kept forever for large tensors: 8 bytes per parameter, not 2."""
    shapes = [(5000,), (40, 30)]
    sd = _trained(lambda ps: OPTS[src](ps, lr=1e-3), shapes, dtype)
    ps, opt = _fresh(lambda ps: OPTS[dst](ps, lr=1e-3), shapes, dtype)
    with pytest.raises(ValueError, match=match):
        opt.load_state_dict(sd)
    assert not opt.state


def test_fused_adamw_still_loads_torch_adamw_and_small_adamw8bit_state() -> None:
    """Same moments under the same names: torch.optim.AdamW's, and AdamW8bit's fp32 moments of small tensors."""
    for src in (torch.optim.AdamW, lambda ps, lr: AdamW8bit(ps, lr=lr, min_8bit_size=10**6)):
        sd = _trained(lambda ps: src(ps, lr=1e-3), [(50,), (4, 3)])  # noqa: B023
        ps, opt = _fresh(lambda ps: FusedAdamW(ps, lr=1e-3), [(50,), (4, 3)])
        opt.load_state_dict(sd)
        assert torch.equal(opt.state[ps[1]]["exp_avg_sq"], sd["state"][1]["exp_avg_sq"])


# -- 4: hyperparameters of every param group ------------------------------------------------------------------------

BAD_GROUPS = [({"lr": -1.0}, "lr"), ({"lr": float("nan")}, "lr"), ({"eps": -1e-3}, "eps"),
              ({"weight_decay": -5.0}, "weight_decay"), ({"betas": (0.9, 1.5)}, "betas"),
              ({"betas": (-0.5, 0.99)}, "betas"), ({"betas": (0.9,)}, "betas"), ({"betas": (0.9, 0.99, 0.5)}, "betas"),
              ({"betas": "ab"}, "betas")]


@pytest.mark.parametrize("cls", [FusedAdamW, AdamW8bit, Adafactor])
@pytest.mark.parametrize(("group", "what"), BAD_GROUPS)
def test_every_param_group_is_checked_as_the_defaults_are(cls, group: dict, what: str) -> None:  # noqa: ANN001
    """Was: accepted; NaN parameters (lr nan), moves of 1e3 (lr -1, eps < 0) or complex-number errors (betas)."""
    p, q = torch.nn.Parameter(torch.ones(5000)), torch.nn.Parameter(torch.ones(10))
    with pytest.raises(ValueError, match=rf"{cls.__name__}: param group 0: {what} must be"):
        cls([{"params": [p], **group}], lr=1e-3)
    opt = cls([p], lr=1e-3)
    with pytest.raises(ValueError, match=rf"{cls.__name__}: param group 1: {what} must be"):
        opt.add_param_group({"params": [q], **group})
    assert len(opt.param_groups) == 1
    with pytest.raises(ValueError, match=rf"{cls.__name__}: betas must be"):
        cls([p], betas=(0.9,))
    sd = copy.deepcopy(opt.state_dict())
    sd["param_groups"][0].update({k: v for k, v in group.items()})
    with pytest.raises(ValueError, match=rf"param group 0 of the loaded state dict: {what} must be"):
        opt.load_state_dict(sd)


def test_min_8bit_size_must_be_an_integer() -> None:
    p = torch.nn.Parameter(torch.ones(10))
    for bad in ("x", 4096.0, -1, True):
        with pytest.raises(ValueError, match="min_8bit_size must be an integer >= 0"):
            AdamW8bit([p], min_8bit_size=bad)
    AdamW8bit([p], min_8bit_size=0)


# -- 5: AdamW8bit's betas ------------------------------------------------------------------------------------------

def _f64_adamw(p0: torch.Tensor, grads: list[torch.Tensor], lr: float, b1: float, b2: float) -> torch.Tensor:
    p = p0.double().clone()
    m, v = torch.zeros_like(p), torch.zeros_like(p)
    for t, g in enumerate(grads, 1):
        g = g.double()
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        p -= lr * (m / (1 - b1**t)) / ((v / (1 - b2**t)).sqrt() + 1e-8)
    return p


@pytest.mark.parametrize("betas", [(0.9, 0.0), (0.9, 0.1), (0.9, 0.5), (0.9, 0.81), (0.5, 0.25)])
def test_adamw8bit_refuses_betas_whose_stored_update_is_unbounded(betas: tuple[float, float]) -> None:
    """Was: accepted, and drifted 3-223% from AdamW (float64) over 60 steps: u = m / (sqrt(v) + eps) is bounded only
    for beta1^2 < beta2."""
    p = torch.nn.Parameter(torch.ones(10))
    with pytest.raises(ValueError, match=r"beta1\^2 >= beta2.*bounded only for beta1\^2 < beta2"):
        AdamW8bit([p], betas=betas)


@pytest.mark.parametrize("betas", [(0.9, 0.82), (0.9, 0.95), (0.5, 0.3), (0.0, 0.0), (0.0, 0.5)])
def test_adamw8bit_betas_it_accepts_stay_close_to_float64(betas: tuple[float, float]) -> None:
    """Just inside the bound (0.9, 0.82) the drift is as small as at (0.9, 0.95): 0.37% against 0.36% here."""
    gen = torch.Generator().manual_seed(0)
    n = 8192
    p0, d = torch.randn(n, generator=gen), torch.randn(n, generator=gen)
    grads = [(d + torch.randn(n, generator=gen)) * 10.0 ** (k % 3 - 1) for k in range(60)]
    p = torch.nn.Parameter(p0.clone())
    opt = AdamW8bit([p], lr=1e-3, betas=betas, weight_decay=0.0, impl="torch")
    for g in grads:
        p.grad = g.clone()
        opt.step()
    ref = _f64_adamw(p0, grads, 1e-3, *betas)
    drift = ((p.double() - ref).norm() / (ref - p0.double()).norm()).item()
    assert drift < 6e-3, drift


# -- 6: Adafactor's own hyperparameters ----------------------------------------------------------------------------

@pytest.mark.parametrize(("kw", "match"), [
    ({"clip_threshold": 0.0}, "clip_threshold must be a number > 0"),
    ({"clip_threshold": -1.0}, "clip_threshold must be a number > 0"),
    ({"clip_threshold": float("nan")}, "clip_threshold must be a number > 0"),
    ({"clip_threshold": None}, "clip_threshold must be a number > 0"),
    ({"momentum_dtype": torch.int8}, "momentum_dtype must be a floating-point torch.dtype"),
    ({"momentum_dtype": "bf16"}, "momentum_dtype must be a floating-point torch.dtype"),
    ({"eps": 0.0}, "eps must be > 0"),
    ({"eps": 1e-50}, "eps must be > 0"),
])
def test_adafactor_refuses_its_own_bad_hyperparameters(kw: dict, match: str) -> None:
    """Was: accepted; eps = 0 with a zero gradient gave NaN parameters, clip_threshold 0 or NaN made every update
    0 or NaN, a negative one flipped its sign, an int8 momentum failed inside lerp."""
    p = torch.nn.Parameter(torch.ones(4, 3))
    with pytest.raises(ValueError, match=match):
        Adafactor([p], **kw)
    with pytest.raises(ValueError, match="param group 0: " + match):
        Adafactor([{"params": [p], **kw}])


def test_adafactor_clip_threshold_inf_turns_clipping_off_as_float64_does() -> None:
    g = torch.Generator().manual_seed(0)
    p0 = torch.randn(6, 5, generator=g)
    grads = [torch.randn(6, 5, generator=g) * 10 for _ in range(3)]
    ref, row, col = p0.double(), torch.zeros(6, dtype=torch.float64), torch.zeros(5, dtype=torch.float64)
    for t, gr in enumerate(grads, 1):
        g2 = gr.double() ** 2 + 1e-30
        row, col = 0.99 * row + 0.01 * g2.mean(-1), 0.99 * col + 0.01 * g2.mean(-2)
        v = row[:, None] * col[None, :] / row.mean() / (1 - 0.99**t)
        ref = ref - 1e-2 * gr.double() / v.sqrt()  # no clipping
    errs = []
    for d in (math.inf, 1.0):
        p = torch.nn.Parameter(p0.clone())
        opt = Adafactor([p], lr=1e-2, betas=(None, 0.99), clip_threshold=d)
        for gr in grads:
            p.grad = gr.clone()
            opt.step()
        errs.append(((p.double() - ref).norm() / (ref - p0.double()).norm()).item())
    assert errs[0] < 1e-5 and errs[1] > 1e-2, errs  # fp32 against float64; clipped at 1.0 it differs
