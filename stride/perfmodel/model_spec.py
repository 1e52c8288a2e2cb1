"""Transformer description by its dimensions, with named presets and a `key=value` spec parser.

Only dimensions are needed: FLOPs, parameters and activation bytes are analytic functions of
them (see `flops.py`, `activations.py`), so the planner can reason about models it cannot build.
Mixture-of-experts models say how many experts each MoE layer has, how many each token is routed
to (top-k), how often a layer is MoE (every layer, or every 2nd as in DeepSpeed-MoE), and the
capacity factor of token-dropping routers (expert GEMMs run on capacity-padded batches).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from stride.config.errors import ConfigError, suggest

# MLP activations: gated ones (swiglu, geglu) have two input projections (gate and up)
ACTIVATIONS = ("gelu", "relu", "squared-relu", "silu", "swiglu", "geglu")
GATED = ("swiglu", "geglu")


@dataclass(frozen=True)
class TransformerSpec:
    """A decoder-only transformer. `ffn` is the MLP inner size (gated: of each of gate/up).

    `head_dim` 0 means hidden / heads; MaxText-style models set it apart (heads x head_dim may
    differ from hidden). `experts` 0 is a dense model; otherwise one MoE layer every `moe_every`
    layers holds `experts` MLPs of `moe_ffn` (0: ffn) of which each token uses `top_k`."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    act: str
    vocab: int
    seq: int
    tied_embeddings: bool = False
    learned_pos: bool = False  # GPT-style learned position embedding (seq x hidden parameters)
    bias: bool = False
    dropout: bool = False  # dropout masks cost activation memory (1 byte per element)
    name: str = "custom"
    head_dim_override: int = 0
    experts: int = 0
    top_k: int = 1
    moe_every: int = 1
    moe_ffn: int = 0
    capacity: float = 1.0  # capacity factor of a token-dropping router (1.0: dropless / exact; experts / top_k: dense)
    # sliding-window attention: `window_layers` of the blocks attend to the last `window` tokens only (Mistral,
    # Gemma 2/3, gpt-oss, Olmo 3); 0: every block attends to the whole causal prefix
    window: int = 0
    window_layers: int = 0

    def __post_init__(self) -> None:
        for f in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq", "top_k", "moe_every"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"model `{self.name}`: `{f}` must be a positive integer, got {v!r}")
        for f in ("head_dim_override", "experts", "moe_ffn"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ConfigError(f"model `{self.name}`: `{f}` must be an integer >= 0, got {v!r}")
        if self.act not in ACTIVATIONS:
            raise ConfigError(f"model `{self.name}`: `act` must be one of {', '.join(ACTIVATIONS)}, got "
                              f"{self.act!r}{suggest(str(self.act), list(ACTIVATIONS))}")
        if not self.head_dim_override and self.hidden % self.heads:
            raise ConfigError(f"model `{self.name}`: hidden {self.hidden} is not divisible by heads {self.heads}")
        if self.heads % self.kv_heads:
            raise ConfigError(f"model `{self.name}`: heads {self.heads} is not divisible by kv_heads {self.kv_heads}")
        if self.experts and self.top_k > self.experts:
            raise ConfigError(f"model `{self.name}`: top_k {self.top_k} exceeds experts {self.experts}")
        # up to 8, or every expert on every token (experts / top_k: a dense dispatch, as transformers' Llama 4 runs)
        most = max(8.0, self.experts / self.top_k) if self.experts else 8.0
        if not 0.5 <= self.capacity <= most:
            raise ConfigError(f"model `{self.name}`: capacity factor must be in [0.5, {most:g}], got {self.capacity!r}")
        for f in ("window", "window_layers"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ConfigError(f"model `{self.name}`: `{f}` must be an integer >= 0, got {v!r}")
        if self.window_layers > self.layers:
            raise ConfigError(f"model `{self.name}`: window_layers {self.window_layers} exceeds layers {self.layers}")

    @property
    def window_work(self) -> float:
        """A fused causal kernel's attention work averaged over the blocks, as a share of the full causal prefix's:
        a query at position i attends to min(i + 1, window) keys, s w - w^2 / 2 in all against s^2 / 2 (the
        kernel skips the blocks outside the window; a materialised core computes them and masks)."""
        s, w = self.seq, self.window
        if not w or not self.window_layers or w >= s:
            return 1.0
        local = (2 * s * w - w * w) / (s * s)
        return ((self.layers - self.window_layers) + self.window_layers * local) / self.layers

    @property
    def head_dim(self) -> int:
        return self.head_dim_override or self.hidden // self.heads

    @property
    def q_dim(self) -> int:
        """Width of the query projection (heads x head_dim; hidden unless head_dim is set apart)."""
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def gated(self) -> bool:
        return self.act in GATED

    @property
    def moe(self) -> bool:
        return self.experts > 0

    @property
    def moe_layers(self) -> int:
        return self.layers // self.moe_every if self.moe else 0

    @property
    def expert_ffn(self) -> int:
        return self.moe_ffn or self.ffn

    def with_seq(self, seq: int) -> TransformerSpec:
        return dataclasses.replace(self, seq=seq)


def _gpt(name: str, layers: int, hidden: int, heads: int, vocab: int = 51200, seq: int = 2048) -> TransformerSpec:
    return TransformerSpec(layers, hidden, heads, heads, 4 * hidden, "gelu", vocab, seq, tied_embeddings=True,
                           learned_pos=True, bias=True, dropout=True, name=name)


def _llama(name: str, layers: int, hidden: int, heads: int, kv: int, ffn: int, vocab: int, seq: int,
           **kw: object) -> TransformerSpec:
    return TransformerSpec(layers, hidden, heads, kv, ffn, "swiglu", vocab, seq, name=name, **kw)  # type: ignore[arg-type]


PRESETS: dict[str, TransformerSpec] = {
    s.name: s
    for s in (
        _gpt("gpt3-1.3b", 24, 2048, 16),
        _gpt("gpt3-2.7b", 32, 2560, 32),
        _gpt("gpt3-6.7b", 32, 4096, 32),
        _gpt("gpt3-13b", 40, 5120, 40),
        _gpt("gpt3-175b", 96, 12288, 96),
        _gpt("gpt-1t", 128, 25600, 160),
        _llama("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096),
        _llama("llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096),
        _llama("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096),
        _llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192),
        _llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192),
        _llama("llama3-405b", 126, 16384, 128, 8, 53248, 128256, 8192),
        _llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 4096, experts=8, top_k=2),
        _llama("mixtral-8x22b", 56, 6144, 48, 8, 16384, 32768, 4096, experts=8, top_k=2),
    )
}

_SPEC_KEYS = {
    "layers": int, "hidden": int, "heads": int, "kv_heads": int, "ffn": int, "act": str, "vocab": int,
    "seq": int, "tied_embeddings": bool, "learned_pos": bool, "bias": bool, "dropout": bool, "name": str,
    "head_dim": int, "experts": int, "top_k": int, "moe_every": int, "moe_ffn": int, "capacity": float,
    "window": int, "window_layers": int,
}
_SPEC_ALIASES = {"kv": "kv_heads", "ffn_hidden": "ffn", "ffn_act": "act", "seq_len": "seq", "n_layers": "layers",
                 "d_model": "hidden", "n_heads": "heads", "topk": "top_k", "num_experts": "experts"}
_FIELD = {"head_dim": "head_dim_override"}
KEY_HELP = ("keys: layers, hidden, heads, kv (kv_heads), ffn, act (" + "|".join(ACTIVATIONS) + "), vocab, seq, "
            "head_dim, experts, top_k, moe_every, moe_ffn, capacity, window (sliding-window tokens), window_layers "
            "(how many blocks use it; default: every block), tied_embeddings, learned_pos, bias, dropout, name")


def parse_model_spec(spec: str) -> TransformerSpec:
    """`llama3-8b`, `llama3-8b,seq=4096` (preset with overrides) or `layers=32,hidden=4096,...`.

    Missing kv_heads defaults to heads, ffn to 4*hidden (gelu) and act to gelu."""
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if not parts:
        raise ConfigError(f"--model: empty model spec; give a preset ({', '.join(PRESETS)}) or {KEY_HELP}")
    base: TransformerSpec | None = None
    if "=" not in parts[0]:
        name = parts.pop(0).lower()
        if name not in PRESETS:
            raise ConfigError(f"--model: unknown preset `{name}`{suggest(name, list(PRESETS))}; "
                              f"presets: {', '.join(PRESETS)}; or give {KEY_HELP}")
        base = PRESETS[name]
    values: dict[str, object] = {}
    for part in parts:
        if "=" not in part:
            raise ConfigError(f"--model: `{part}` is not key=value (in {spec!r}); {KEY_HELP}")
        key, raw = (x.strip() for x in part.split("=", 1))
        key = _SPEC_ALIASES.get(key, key)
        if key not in _SPEC_KEYS:
            raise ConfigError(f"--model: unknown key `{key}`{suggest(key, list(_SPEC_KEYS))} (in {spec!r}); {KEY_HELP}")
        if key in values:  # `layers=2,...,layers=3`: which one was meant is not for stride to guess
            raise ConfigError(f"--model: `{key}` is given twice (in {spec!r})")
        tp = _SPEC_KEYS[key]
        try:
            if tp is int:
                values[key] = int(raw)
            elif tp is float:
                values[key] = float(raw)
            elif tp is bool:
                if raw.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(raw)
                values[key] = raw.lower() in ("true", "1")
            else:
                values[key] = raw
        except ValueError:
            raise ConfigError(f"--model: `{key}` expects {tp.__name__}, got {raw!r} (in {spec!r})") from None
    if "head_dim" in values and int(values["head_dim"]) < 1:  # type: ignore[call-overload]
        raise ConfigError(f"--model: `head_dim` must be >= 1 (leave it out for hidden / heads) (in {spec!r})")
    moe_keys = [k for k in ("top_k", "moe_every", "moe_ffn", "capacity") if k in values]
    experts = values.get("experts", base.experts if base is not None else 0)
    if moe_keys and not experts:
        raise ConfigError(f"--model: {', '.join(moe_keys)} given for a dense model (experts is 0): set experts=N "
                          f"for a mixture of experts (in {spec!r})")
    if values.get("window") and "window_layers" not in values:  # a window said alone is every block's
        values["window_layers"] = values.get("layers", base.layers if base is not None else 0)
    values = {_FIELD.get(k, k): v for k, v in values.items()}
    if base is not None:
        return dataclasses.replace(base, **values)  # type: ignore[arg-type]
    missing = [k for k in ("layers", "hidden", "heads", "vocab", "seq") if k not in values]
    if missing:
        raise ConfigError(f"--model: missing {', '.join(missing)} (in {spec!r}); {KEY_HELP}")
    values.setdefault("kv_heads", values["heads"])
    values.setdefault("act", "gelu")
    values.setdefault("ffn", 4 * int(values["hidden"]))  # type: ignore[call-overload]
    return TransformerSpec(**values)  # type: ignore[arg-type]
