"""AdamW8bit's state format 1 (e4m3 codes of m and sqrt(v), one absmax / 448 scale per 256 values),
read and converted to format 2 (adamw8bit_codes.py): from a state dict, or from a DCP checkpoint.

docs/kernels.md measures why format 2 replaced it (drift from fp32 AdamW 5.7 % -> 0.36 %).
"""

from __future__ import annotations

from typing import Any

import torch

from stride.optim.adamw8bit_codes import (
    Q_KEYS,
    STATE_FORMAT,
    decode_sqrt_v,
    encode_sqrt_v,
    encode_update,
    zero_q8_state,
)

FORMAT1_KEYS = ("exp_avg_codes", "exp_avg_scale", "exp_avg_sqrt_codes", "exp_avg_sqrt_scale")


def decode_e4m3(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Format 1's codes.float() * scale (torch's float8 conversion: exact)."""
    return codes.view(torch.float8_e4m3fn).to(torch.float32).mul_(scale[:, None])


def _state_format(group: dict[str, Any], states: list[dict[str, Any]]) -> int:
    declared = group.get("state_format")
    kinds = {1 if "exp_avg_codes" in s else 2 if "exp_avg_normed_codes" in s else 0 if "exp_avg" in s else -1
             for s in states}
    if -1 in kinds:
        keys = sorted({k for s in states if not {"exp_avg_codes", "exp_avg_normed_codes", "exp_avg"} & set(s)
                       for k in s})
        raise ValueError(f"AdamW8bit: a parameter's state has keys {keys}, which are neither state format 1 "
                         f"({', '.join(FORMAT1_KEYS)}) nor format {STATE_FORMAT} ({', '.join(Q_KEYS)})")
    found = kinds - {0}
    if declared is None:  # format 1 did not record its format
        if found == {STATE_FORMAT}:
            raise ValueError(f"AdamW8bit: the state dict has format-{STATE_FORMAT} keys but its param group has no "
                             "'state_format'; it was assembled from parts of different formats")
        return 1
    if declared not in (1, STATE_FORMAT) or found - {declared}:
        raise ValueError(f"AdamW8bit: the state dict says state format {declared!r} and holds keys of format(s) "
                         f"{sorted(found)}; this version reads format 1 (converted on load) and format {STATE_FORMAT}")
    return int(declared)


def upgrade_state_dict(state_dict: dict[str, Any]) -> dict[str, Any]:
    """A state dict in format 2: returned as is, or converted from format 1 (a new dict, input untouched).

    Format 1 stored e4m3 codes of m and sqrt(v) with an absmax / 448 scale per block. Conversion
    decodes both, re-encodes sqrt(v) on the format-2 grid, and stores u = m / (sqrt(v_hat) + eps) with
    the re-encoded sqrt(v), so the next step rebuilds m to within the int8 code's resolution."""
    groups = state_dict["param_groups"]
    out_state: dict[Any, Any] = {}
    converted = False
    for group in groups:
        ids = [i for i in group["params"] if i in state_dict["state"]]
        states = [state_dict["state"][i] for i in ids]
        fmt = _state_format(group, states)
        for i, s in zip(ids, states, strict=True):
            if fmt == 1 and "exp_avg_codes" in s:
                out_state[i] = convert_format1(s, group)
                converted = True
            else:
                out_state[i] = s
    if not converted and all(g.get("state_format") == STATE_FORMAT for g in groups):
        return state_dict
    for i, s in state_dict["state"].items():  # states of parameters no group lists: passed on
        out_state.setdefault(i, s)
    return {"state": out_state, "param_groups": [{**g, "state_format": STATE_FORMAT} for g in groups]}


@torch.no_grad()
def convert_format1(s: dict[str, Any], group: dict[str, Any]) -> dict[str, Any]:
    missing = [k for k in FORMAT1_KEYS if k not in s]
    if missing:
        raise ValueError(f"AdamW8bit: a state-format-1 parameter state lacks {missing}")
    codes = s["exp_avg_codes"]
    m = decode_e4m3(codes, s["exp_avg_scale"].float())
    r = decode_e4m3(s["exp_avg_sqrt_codes"], s["exp_avg_sqrt_scale"].float())
    new = zero_q8_state(codes.shape[0], codes.device)
    encode_sqrt_v(r, new["exp_avg_sqrt_grid_codes"], new["exp_avg_sqrt_grid_bounds"])
    r = decode_sqrt_v(new["exp_avg_sqrt_grid_codes"], new["exp_avg_sqrt_grid_bounds"])
    step = int(float(s["step"]))
    bc2_sqrt = (1.0 - group["betas"][1] ** step) ** 0.5 if step > 0 else 1.0
    u = m.div_(r.div_(bc2_sqrt).add_(group["eps"]))
    encode_update(u, 1.0, new["exp_avg_normed_codes"], new["exp_avg_normed_scale"])
    return {"step": s["step"], **new}


def checkpoint_template(optim_sd: dict[str, Any], saved_keys: set[str]) -> dict[str, Any]:
    """For stride.checkpoint's DCP load: adapt the template (`get_state_dict`'s optimizer part, nested
    or flat) to a checkpoint whose keys (`saved_keys`, without the "optim." prefix) hold state format
    1, so DCP reads those tensors and `load_state_dict` converts them; refuse, naming what was found,
    a checkpoint whose 8-bit state is in neither format (DCP would only report a missing key)."""
    flat = "state" not in optim_sd
    states = ({k[len("state."):-len(".exp_avg_normed_codes")]: None for k in optim_sd
               if k.startswith("state.") and k.endswith(".exp_avg_normed_codes")} if flat
              else {fqn: st for fqn, st in optim_sd["state"].items() if "exp_avg_normed_codes" in st})
    for fqn in states:
        if f"state.{fqn}.exp_avg_normed_codes" in saved_keys:
            continue
        if f"state.{fqn}.exp_avg_codes" not in saved_keys:
            found = sorted(k.rsplit(".", 1)[1] for k in saved_keys if k.startswith(f"state.{fqn}."))
            raise ValueError(f"AdamW8bit: the checkpoint's optimizer state for {fqn} has keys {found}: neither "
                             f"state format 1 ({', '.join(FORMAT1_KEYS)}) nor format {STATE_FORMAT} "
                             f"({', '.join(Q_KEYS)})")
        codes = optim_sd[f"state.{fqn}.exp_avg_normed_codes"] if flat else states[fqn]["exp_avg_normed_codes"]
        old = {k: torch.zeros(codes.shape if k.endswith("codes") else codes.shape[:1], device=codes.device,
                              dtype=torch.float8_e4m3fn if k.endswith("codes") else torch.float32)
               for k in FORMAT1_KEYS}
        target = optim_sd if flat else states[fqn]
        for k in Q_KEYS:
            target.pop(f"state.{fqn}.{k}" if flat else k)
        target.update({f"state.{fqn}.{k}": v for k, v in old.items()} if flat else old)
    if flat:
        for k in [k for k in optim_sd if k.startswith("param_groups.") and k.endswith(".state_format")]:
            if k not in saved_keys:
                optim_sd.pop(k)
    else:
        for i, group in enumerate(optim_sd["param_groups"]):
            if f"param_groups.{i}.state_format" not in saved_keys:
                group.pop("state_format", None)
    return optim_sd
