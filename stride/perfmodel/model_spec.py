"""Transformer description by its dimensions, with named presets and a `key=value` spec parser.

Only dimensions are needed: FLOPs, parameters and activation bytes are analytic functions of
them (see `flops.py`, `activations.py`), so the planner can reason about models it cannot build.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from stride.config.errors import ConfigError, suggest

ACTIVATIONS = ("gelu", "swiglu")


@dataclass(frozen=True)
class TransformerSpec:
    """A decoder-only transformer. `ffn` is the MLP inner size (for swiglu: of each of gate/up)."""

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

    def __post_init__(self) -> None:
        for f in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"model `{self.name}`: `{f}` must be a positive integer, got {v!r}")
        if self.act not in ACTIVATIONS:
            raise ConfigError(f"model `{self.name}`: `act` must be one of {ACTIVATIONS}, got {self.act!r}"
                              f"{suggest(str(self.act), list(ACTIVATIONS))}")
        if self.hidden % self.heads:
            raise ConfigError(f"model `{self.name}`: hidden {self.hidden} is not divisible by heads {self.heads}")
        if self.heads % self.kv_heads:
            raise ConfigError(f"model `{self.name}`: heads {self.heads} is not divisible by kv_heads {self.kv_heads}")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def with_seq(self, seq: int) -> TransformerSpec:
        return dataclasses.replace(self, seq=seq)


def _gpt(name: str, layers: int, hidden: int, heads: int, vocab: int = 51200, seq: int = 2048) -> TransformerSpec:
    return TransformerSpec(layers, hidden, heads, heads, 4 * hidden, "gelu", vocab, seq, tied_embeddings=True,
                           learned_pos=True, bias=True, dropout=True, name=name)


def _llama(name: str, layers: int, hidden: int, heads: int, kv: int, ffn: int, vocab: int,
           seq: int) -> TransformerSpec:
    return TransformerSpec(layers, hidden, heads, kv, ffn, "swiglu", vocab, seq, name=name)


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
    )
}

_SPEC_KEYS = {
    "layers": int, "hidden": int, "heads": int, "kv_heads": int, "ffn": int, "act": str, "vocab": int,
    "seq": int, "tied_embeddings": bool, "learned_pos": bool, "bias": bool, "dropout": bool, "name": str,
}
_SPEC_ALIASES = {"kv": "kv_heads", "ffn_hidden": "ffn", "ffn_act": "act", "seq_len": "seq", "n_layers": "layers",
                 "d_model": "hidden", "n_heads": "heads"}


def parse_model_spec(spec: str) -> TransformerSpec:
    """`llama3-8b`, `llama3-8b,seq=4096` (preset with overrides) or `layers=32,hidden=4096,...`.

    Missing kv_heads defaults to heads, ffn to 4*hidden (gelu) and act to gelu."""
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if not parts:
        raise ConfigError("--model: empty model spec")
    base: TransformerSpec | None = None
    if "=" not in parts[0]:
        name = parts.pop(0).lower()
        if name not in PRESETS:
            raise ConfigError(f"--model: unknown preset `{name}`{suggest(name, list(PRESETS))}; "
                              f"presets: {', '.join(PRESETS)}; or give layers=..,hidden=..,heads=..,vocab=..,seq=..")
        base = PRESETS[name]
    values: dict[str, object] = {}
    for part in parts:
        if "=" not in part:
            raise ConfigError(f"--model: `{part}` is not key=value (in {spec!r})")
        key, raw = (x.strip() for x in part.split("=", 1))
        key = _SPEC_ALIASES.get(key, key)
        if key not in _SPEC_KEYS:
            raise ConfigError(f"--model: unknown key `{key}`{suggest(key, list(_SPEC_KEYS))} (in {spec!r})")
        tp = _SPEC_KEYS[key]
        try:
            if tp is int:
                values[key] = int(raw)
            elif tp is bool:
                if raw.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(raw)
                values[key] = raw.lower() in ("true", "1")
            else:
                values[key] = raw
        except ValueError:
            raise ConfigError(f"--model: `{key}` expects {tp.__name__}, got {raw!r} (in {spec!r})") from None
    if base is not None:
        return dataclasses.replace(base, **values)  # type: ignore[arg-type]
    missing = [k for k in ("layers", "hidden", "heads", "vocab", "seq") if k not in values]
    if missing:
        raise ConfigError(f"--model: missing {', '.join(missing)} (in {spec!r})")
    values.setdefault("kv_heads", values["heads"])
    values.setdefault("act", "gelu")
    values.setdefault("ffn", 4 * int(values["hidden"]))  # type: ignore[call-overload]
    return TransformerSpec(**values)  # type: ignore[arg-type]
