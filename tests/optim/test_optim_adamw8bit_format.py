"""AdamW8bit's state format: format 1 (e4m3, before format 2) is converted on load, through
`load_state_dict` and through a DCP checkpoint; anything else is refused with a message naming it."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch

from stride.optim.adamw8bit import AdamW8bit
from stride.optim.adamw8bit_codes import BLOCK, Q_KEYS, STATE_FORMAT, decode_m, decode_sqrt_v
from stride.optim.adamw8bit_format1 import FORMAT1_KEYS, decode_e4m3

FIXTURE = Path(__file__).parent / "data" / "adamw8bit_state_format1.pt"
HP = {"lr": 1e-2, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.01}


def load_fixture() -> dict:
    """A state dict written by the format-1 optimizer (commit f841289) after 3 steps, the parameters
    then, the 4th step's gradients and the parameters that optimizer reached after the 4th step."""
    return torch.load(FIXTURE, weights_only=True)


def test_format1_state_dict_is_converted_on_load():
    saved = load_fixture()
    params = [p.clone().requires_grad_() for p in saved["params"]]
    opt = AdamW8bit(params, **HP)
    opt.load_state_dict(saved["optim"])
    assert opt.param_groups[0]["state_format"] == STATE_FORMAT
    big, small = (opt.state[p] for p in params)
    assert set(big) == {"step", *Q_KEYS} and set(small) == {"step", "exp_avg", "exp_avg_sq"}
    assert big["step"].item() == 3
    # the small tensor's fp32 moments are loaded as saved (no arithmetic: bitwise on any machine)
    for k in ("exp_avg", "exp_avg_sq"):
        assert torch.equal(small[k], saved["optim"]["state"][1][k]), k
    # the moments it holds now decode to format 1's: sqrt(v) within the grid's resolution, m within
    # the int8 code's (half a step of the block's largest normalised update, times the denominator)
    old = saved["optim"]["state"][0]
    m1 = decode_e4m3(old["exp_avg_codes"], old["exp_avg_scale"])
    r1 = decode_e4m3(old["exp_avg_sqrt_codes"], old["exp_avg_sqrt_scale"])
    r2 = decode_sqrt_v(big["exp_avg_sqrt_grid_codes"], big["exp_avg_sqrt_grid_bounds"])
    m2 = decode_m(big["exp_avg_normed_codes"], big["exp_avg_normed_scale"], r2, (1 - 0.95**3) ** 0.5, 1e-8)
    assert ((r2 - r1).abs() / r1).max() < 0.02
    assert ((m2 - m1).abs().amax(1) / m1.abs().amax(1)).max() < 0.02
    # and the next step lands where format 1's next step did, to within the conversion's rounding
    for p, g in zip(params, saved["next_grads"], strict=True):
        p.grad = g
    before = [p.detach().clone() for p in params]
    opt.step()
    (p8, p32), (r8, r32) = params, saved["after_next_step"]
    # The fixture's step was computed on another CPU: vectorised fp32 kernels differ in the last bit
    # across CPU families (torch.equal failed on AMD EPYC), so a tolerance of a few ulps, not equality.
    torch.testing.assert_close(p32.detach(), r32, rtol=4e-7, atol=1e-8)
    assert ((p8.detach() - r8).norm() / (r8 - before[0]).norm()) < 0.02  # measured 0.4%


def test_conversion_leaves_the_given_state_dict_untouched():
    saved = load_fixture()
    sd = saved["optim"]
    snapshot = copy.deepcopy(sd)
    AdamW8bit([p.clone().requires_grad_() for p in saved["params"]], **HP).load_state_dict(sd)
    assert sd["param_groups"] == snapshot["param_groups"]
    for i, st in snapshot["state"].items():
        assert set(sd["state"][i]) == set(st)
        assert all(torch.equal(sd["state"][i][k].float(), v.float()) for k, v in st.items())


def _format2_state_dict() -> tuple[list[torch.Tensor], dict]:
    params = [torch.randn(64, 80, requires_grad=True), torch.randn(9, requires_grad=True)]
    opt = AdamW8bit(params, **HP)
    for p in params:
        p.grad = torch.randn_like(p)
    opt.step()
    return params, copy.deepcopy(opt.state_dict())


def test_unknown_format_is_refused_naming_it():
    params, sd = _format2_state_dict()
    sd["param_groups"][0]["state_format"] = 3
    with pytest.raises(ValueError, match="says state format 3 .* reads format 1 .* and format 2"):
        AdamW8bit(params, **HP).load_state_dict(sd)


def test_mixed_or_foreign_state_is_refused():
    params, sd = _format2_state_dict()
    del sd["param_groups"][0]["state_format"]  # format-2 keys under a group that does not say its format
    with pytest.raises(ValueError, match="assembled from parts of different formats"):
        AdamW8bit(params, **HP).load_state_dict(sd)
    params, sd = _format2_state_dict()
    sd["state"][0] = {"step": sd["state"][0]["step"], "qmap": torch.zeros(256), "absmax": torch.zeros(20)}
    with pytest.raises(ValueError, match=r"keys \['absmax', 'qmap', 'step'\], which are neither state format 1"):
        AdamW8bit(params, **HP).load_state_dict(sd)


# --- the DCP checkpoint path (stride.checkpoint calls AdamW8bit.checkpoint_template) -------------------


class Format1Writer(AdamW8bit):
    """Saves its state as format 1 did (e4m3 codes of m and sqrt(v), absmax / 448 per block): a
    stand-in for a checkpoint written by stride before format 2."""

    def state_dict(self):  # type: ignore[override]
        sd = super().state_dict()
        steps = {i: int(st["step"]) for i, st in sd["state"].items()}
        out = {}
        for i, st in sd["state"].items():
            if "exp_avg_normed_codes" not in st:
                out[i] = st
                continue
            r = decode_sqrt_v(st["exp_avg_sqrt_grid_codes"], st["exp_avg_sqrt_grid_bounds"])
            prev = (1 - 0.95 ** steps[i]) ** 0.5
            m = decode_m(st["exp_avg_normed_codes"], st["exp_avg_normed_scale"], r.clone(), prev, 1e-8)
            new = {"step": st["step"]}
            for name, x in (("exp_avg", m), ("exp_avg_sqrt", r)):
                scale = x.abs().amax(1).clamp_min(1e-30) / 448.0
                new[f"{name}_codes"] = (x / scale[:, None]).to(torch.float8_e4m3fn)
                new[f"{name}_scale"] = scale
            out[i] = new
        return {"state": out, "param_groups": [{k: v for k, v in g.items() if k != "state_format"}
                                               for g in sd["param_groups"]]}


def test_dcp_checkpoint_in_format1_resumes_converted(tmp_path, monkeypatch):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "checkpoint"))
    from ckpt_helpers import Crash, CrashAt, fit

    from stride.optim import factory

    real = factory.OPTIMIZERS["adamw8bit"]
    override = 'optim.name="adamw8bit"'
    ref = fit(tmp_path / "ref", override, "checkpoint.enabled=false")
    monkeypatch.setitem(factory.OPTIMIZERS, "adamw8bit", lambda params, cfg, lr: Format1Writer(
        params, lr=lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay))
    with pytest.raises(Crash):
        fit(tmp_path / "run", override, callbacks=[CrashAt(7)])  # the last checkpoint (format 1) is at step 6
    from torch.distributed.checkpoint import FileSystemReader

    meta = max((tmp_path / "run").rglob(".metadata"))  # the newest kept checkpoint (keep_last=2)
    keys = set(FileSystemReader(meta.parent).read_metadata().state_dict_metadata)
    assert any(k.endswith(".exp_avg_codes") for k in keys) and not any(k.endswith("_normed_codes") for k in keys)
    monkeypatch.setitem(factory.OPTIMIZERS, "adamw8bit", real)
    resumed = fit(tmp_path / "run", override)
    assert resumed["steps"] == 24
    # not bit-equal to the uninterrupted run (the conversion rounds m and sqrt(v) once), but close
    assert abs(resumed["final_train_loss"] / ref["final_train_loss"] - 1) < 0.01, (resumed, ref)


def test_checkpoint_template_refuses_a_foreign_optimizer_state():
    """What DCP would report as a missing key becomes a message naming the formats and the keys found."""
    params = [torch.randn(64, 80, requires_grad=True)]
    opt = AdamW8bit(params, **HP)
    params[0].grad = torch.randn(64, 80)
    opt.step()
    template = {"state": {"w": dict(opt.state[params[0]])}, "param_groups": [dict(opt.param_groups[0], params=["w"])]}
    saved = {"state.w.step", "state.w.qmap", "state.w.absmax", "param_groups.0.lr"}
    with pytest.raises(ValueError, match=r"for w has keys \['absmax', 'qmap', 'step'\]: neither state format 1"):
        opt.checkpoint_template(template, saved)
    # a format-1 checkpoint: the template asks for format 1's tensors (shapes and dtypes) instead
    saved = {"state.w.step", *(f"state.w.{k}" for k in FORMAT1_KEYS), "param_groups.0.lr"}
    out = opt.checkpoint_template(copy.deepcopy(template), saved)
    blocks = -(-64 * 80 // BLOCK)
    assert out["state"]["w"]["exp_avg_codes"].shape == (blocks, BLOCK)
    assert out["state"]["w"]["exp_avg_codes"].dtype == torch.float8_e4m3fn
    assert out["state"]["w"]["exp_avg_sqrt_scale"].shape == (blocks,)
    assert "state_format" not in out["param_groups"][0] and not set(Q_KEYS) & set(out["state"]["w"])
    # the flat form (pipeline parallelism) the same way
    flat = {f"state.w.{k}": v for k, v in opt.state[params[0]].items()} | {"param_groups.w.state_format": 2}
    out = opt.checkpoint_template(flat, saved)
    assert "state.w.exp_avg_codes" in out and "state.w.exp_avg_normed_codes" not in out
    assert "param_groups.w.state_format" not in out
