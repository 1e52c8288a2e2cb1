"""What the round-19 blind test found (docs/perfmodel.md, "Round 19"): sliding-window attention. Gemma 3 12B at 32K
(a 1024-token window on 40 of its 48 blocks) read 45-52% slow with every block attending to the whole prefix."""

from __future__ import annotations

import dataclasses

import pytest

from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.model_spec import TransformerSpec
from stride.perfmodel.published import row_inputs
from stride.perfmodel.row_text import sliding_window


@pytest.mark.parametrize(("text", "want"), [
    ("sliding window 1024 on 5 of every 6 layers (40 local layers, 8 global full-attention layers)", (1024, 5 / 6)),
    ("40 local layers, 8 global; sliding window 1024", (1024, 40 / 48)),
    ("alternating sliding-window (128 tokens) and full attention layers", (128, 0.5)),
    ("SWA window 4096 on 3 of every 4 layers with last layer full attention", (4096, 0.75)),
    ("sliding window 4096", (4096, 1.0)),
    ("sliding window attention pattern SSSL (short window = seq_len/2 = 1024, long = 2048)", (1024, 0.75)),
    # no size, a size of 0, or another kind of window: nothing modelled
    ("baseline without MegaScale's parallel transformer block / sliding-window attention / LAMB", None),
    ("full causal attention (no sliding window in this block; sliding_window_size 0)", None),
    ("chunked attention window 8192 (= seq_len)", None),
])
def test_sliding_window_words(text: str, want: tuple[int, float] | None) -> None:
    got = sliding_window(text)
    assert got == (pytest.approx(want) if want else None)


def test_window_work_is_the_band_of_the_causal_square() -> None:
    spec = TransformerSpec(layers=48, hidden=3840, heads=16, kv_heads=8, ffn=15360, act="geglu", vocab=262144,
                           seq=32768, head_dim_override=256)
    assert spec.window_work == 1.0
    local = dataclasses.replace(spec, window=1024, window_layers=40)
    # 8 global blocks at s^2/2, 40 at s w - w^2/2: (8 + 40 (2 s w - w^2) / s^2) / 48
    s, w = 32768, 1024
    assert local.window_work == pytest.approx((8 + 40 * (2 * s * w - w * w) / s**2) / 48)
    assert dataclasses.replace(local, window=s).window_work == 1.0  # a window as long as the sequence: none


def test_a_gemma3_row_reads_its_window_and_runs_faster() -> None:
    row = {"row_id": "g3", "model": "Gemma 3 12B", "arch": "GeGLU, GQA 16q/8kv, head_dim=256, sliding window 1024 on "
           "5 of every 6 layers (40 local layers, 8 global full-attention layers), tied embeddings, flash attention",
           "layers": "48", "hidden": "3840", "heads": "16", "kv_heads": "8", "ffn_hidden": "15360",
           "ffn_act": "geglu", "vocab": "262144", "seq_len": "32768", "global_batch_seqs": "256", "micro_batch": "1",
           "gpu": "TPU v6e", "num_gpus": "256", "dp": "256", "tp": "1", "pp": "1", "zero_or_fsdp": "FSDP",
           "recompute": "full", "precision": "bf16", "framework": "MaxText", "meas_tokens_per_s_per_gpu": "4477.8"}
    got = row_inputs(row, load_catalog())
    assert (got.spec.window, got.spec.window_layers) == (1024, 40)
    assert got.spec.window_work == pytest.approx(0.218, abs=1e-3)  # 4.6x less attention work
