"""Every workload model: shapes, causality where claimed, and training through the trainer."""

from __future__ import annotations

import pytest
import torch
from helpers import small_config

from stride.config import ConfigError
from stride.models import build_model
from stride.models.recurrent import TCNBlock
from stride.models.transformer import TimeSeriesTransformer
from stride.train.trainer import Trainer


@pytest.mark.parametrize("name", ["ts_transformer", "mlp", "lstm", "tcn", "deeplob"])
@pytest.mark.parametrize("loss", ["mse", "quantile"])
def test_forecaster_shapes(name: str, loss: str) -> None:
    cfg = small_config(model__name=name, model__loss=loss)
    model = build_model(cfg.model, n_features=7, seq_len=16, n_horizons=3)
    out = model(torch.randn(5, 16, 7))
    assert out.shape == ((5, 3, 3) if loss == "quantile" else (5, 3))


@pytest.mark.parametrize("name", ["lstm", "tcn", "deeplob"])
def test_sequence_models_train(name: str) -> None:
    r = Trainer(config=small_config(model__name=name, train__steps=4, metrics__flops=True),
                write_run_dir=False).fit().summary
    assert torch.isfinite(torch.tensor(r["final_train_loss"])) and r["flops_per_step"] > 0


def test_causal_transformer_ignores_the_future() -> None:
    torch.manual_seed(0)
    m = TimeSeriesTransformer(3, 8, 2, d_model=16, n_layers=2, n_heads=2, causal=True).eval()
    x = torch.randn(2, 8, 3)
    # Causal attention: the output at token 4 depends on tokens 0..4 only.
    h = m.embed(x)
    for b in m.blocks:
        h = b(h, m.rope_cos, m.rope_sin)
    x2 = x.clone()
    x2[:, 5:] += 10.0
    h2 = m.embed(x2)
    for b in m.blocks:
        h2 = b(h2, m.rope_cos, m.rope_sin)
    assert torch.allclose(h[:, :5], h2[:, :5], atol=1e-6) and not torch.allclose(h[:, 5:], h2[:, 5:])


def test_tcn_block_is_causal() -> None:
    torch.manual_seed(0)
    block = TCNBlock(4, kernel=3, dilation=2, dropout=0.0)
    x = torch.randn(1, 4, 12)
    x2 = x.clone()
    x2[..., 8:] += 5.0
    assert torch.allclose(block(x)[..., :8], block(x2)[..., :8])


def test_patch_embedding_and_bidirectional() -> None:
    cfg = small_config(model__patch_len=4, model__causal=False)
    m = build_model(cfg.model, 7, 16, 2)
    assert m(torch.randn(3, 16, 7)).shape == (3, 2) and m.rope_cos.shape[0] == 4


def test_return_tokens_are_equal_probability_bins() -> None:
    from stride.data.tokens import return_tokens

    cfg = small_config(data__seq_len=32, data__n_steps=4096)
    b = return_tokens(cfg.data, 16, vocab=8)
    x, y = b.train.x, b.train.y
    assert x.shape[1] == 32 and torch.equal(x[:, 1:], y[:, :-1])  # next-token targets
    counts = torch.bincount(x.flatten(), minlength=8).float()
    assert (counts / counts.sum() - 1 / 8).abs().max() < 0.01  # bins fitted on the training span


def test_token_lm_learns_through_the_trainer() -> None:
    # A sequence with structure (period 5) must be learnt well below the uniform log(V).
    seq = torch.arange(64 * 33).remainder(5).view(64, 33)
    cfg = small_config(model__name="token_lm", data__seq_len=32, train__batch_size=16, train__steps=40,
                       optim__lr=3e-3)
    model = build_model(cfg.model, n_features=16, seq_len=32, n_horizons=0)
    t = Trainer(model=model, train_data=(seq[:, :-1], seq[:, 1:]), config=cfg, write_run_dir=False)
    r = t.fit().summary
    assert r["final_train_loss"] < 0.3 * torch.log(torch.tensor(16.0)).item()
    assert r["timesteps_per_s"] == pytest.approx(32 * r["samples_per_s"])


def test_bad_size_and_heads() -> None:
    with pytest.raises(ConfigError, match="did you mean `small`"):
        build_model(small_config(model__size="smal").model, 7, 16, 2)
    with pytest.raises(ConfigError, match="n_heads"):
        build_model(small_config(model__d_model=30, model__n_heads=4).model, 7, 16, 2)


@pytest.mark.parametrize("name", ["ts_transformer", "token_lm"])
def test_heads_of_odd_size_and_an_mlp_of_no_width_are_refused_for_both_transformers(name: str) -> None:
    # token_lm had no check: d_model 12 over 4 heads (head size 3) built and ran, RoPE broadcasting the odd element
    # into a made-up pair; d_model 30 over 4 heads raised a bare ValueError naming no key
    for d_model, heads in ((12, 4), (30, 4)):
        with pytest.raises(ConfigError, match=r"`model.n_heads` = 4 heads of even size.*set `model.n_heads` to one of"):
            build_model(small_config(model__name=name, model__d_model=d_model, model__n_heads=heads).model, 11, 16, 2)
    # ffn_mult 0.01 x 64 rounds to a SwiGLU hidden size of 0: both built a zero-width MLP and trained it
    with pytest.raises(ConfigError, match=r"`model.ffn_mult` = 0.01 .* hidden size of 0.*>= 0.125"):
        build_model(small_config(model__name=name, model__ffn_mult=0.01).model, 11, 16, 2)
    narrow = build_model(small_config(model__name=name, model__ffn_mult=0.125).model, 11, 16, 2)
    assert narrow.blocks[0].mlp.w1.out_features == 8


def _per_step_state(model: torch.nn.Module, name: str, x: torch.Tensor) -> torch.Tensor:
    """The last layer's state at every time step [B, T, *] (what the head reads at the window's last step)."""
    seen: list[torch.Tensor] = []
    module = model.norm if name == "ts_transformer" else model.blocks[-1]
    hook = module.register_forward_hook(lambda _m, _i, out: seen.append(out))
    model(x)
    hook.remove()
    out = seen[0][0] if isinstance(seen[0], tuple) else seen[0]  # nn.LSTM (deeplob's block) returns (out, state)
    return out.transpose(1, 2) if name == "tcn" else out


@pytest.mark.parametrize("name", ["ts_transformer", "lstm", "tcn"])
@pytest.mark.parametrize("ac", ["none", "full"])
def test_causal_forecasters_ignore_the_future_exactly_in_float64(name: str, ac: str) -> None:
    """Every step's state is unchanged (exactly) by any change after it, and the forecast from the window cut at t
    is the head on the full window's state at t: no future step, no position offset between the two."""
    from stride.train.apply import apply_activation_checkpointing

    torch.manual_seed(0)
    model = build_model(small_config(model__name=name).model, 5, 12, 2).double().eval()
    apply_activation_checkpointing(model, ac)
    x = torch.randn(3, 12, 5, dtype=torch.float64)
    state = _per_step_state(model, name, x)
    for t in range(11):
        later = x.clone()
        later[:, t + 1:] += 7.0
        assert torch.equal(_per_step_state(model, name, later)[:, : t + 1], state[:, : t + 1])
        cut = model(x[:, : t + 1])
        torch.testing.assert_close(cut, model.head(state[:, t]), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("patch_len", [2, 4])
def test_patched_transformer_is_causal_at_patch_granularity_exactly_in_float64(patch_len: int) -> None:
    """With `model.patch_len` = p a token is a patch of p steps: its state reads every step of its own patch (the
    later ones included) and no step after the patch; the forecast from the window cut after patch k is the head on
    the full window's state of token k."""
    torch.manual_seed(0)
    model = build_model(small_config(model__patch_len=patch_len).model, 5, 12, 2).double().eval()
    x = torch.randn(3, 12, 5, dtype=torch.float64)
    state = _per_step_state(model, "ts_transformer", x)
    assert state.shape[1] == 12 // patch_len
    for k in range(12 // patch_len):
        end = (k + 1) * patch_len  # the first step after patch k
        later = x.clone()
        later[:, end:] += 7.0
        assert torch.equal(_per_step_state(model, "ts_transformer", later)[:, : k + 1], state[:, : k + 1])
        last = x.clone()
        last[:, end - 1] += 7.0  # the last step of patch k: read by token k (a step's state is its patch's)
        moved = _per_step_state(model, "ts_transformer", last)
        assert torch.equal(moved[:, :k], state[:, :k]) and not torch.allclose(moved[:, k], state[:, k])
        torch.testing.assert_close(model(x[:, :end]), model.head(state[:, k]), rtol=1e-12, atol=1e-12)


def test_float64_transformer_norm_and_rope_run_in_float64() -> None:
    # RMSNorm and RoPE cast to fp32 (`x.float()`) whatever the input: a float64 model was fp32-exact there (1e-8)
    from stride.models.transformer.layers import RMSNorm, apply_rope, rope_cache

    torch.manual_seed(0)
    x = torch.randn(4, 8, 16, dtype=torch.float64)
    norm = RMSNorm(16).double()
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(norm(x), expected, rtol=1e-14, atol=1e-14)
    cos, sin = (t.double() for t in rope_cache(8, 16))
    y = apply_rope(x.view(4, 1, 8, 16), cos, sin)
    x1, x2 = x.view(4, 1, 8, 16)[..., 0::2], x.view(4, 1, 8, 16)[..., 1::2]
    torch.testing.assert_close(y[..., 0::2], x1 * cos - x2 * sin, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(y[..., 1::2], x1 * sin + x2 * cos, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize(("name", "override", "named"), [
    ("lstm", ["model.n_heads=8"], "`model.n_heads` = 8 acts on ts_transformer and token_lm"),
    ("tcn", ["model.ffn_mult=4.0"], "`model.ffn_mult` = 4.0 acts on ts_transformer and token_lm"),
    ("lstm", ["model.patch_len=4"], "`model.patch_len` = 4 acts on `model.name` = 'ts_transformer'"),
    ("token_lm", ["model.causal=false"], "`model.causal` = false acts on `model.name` = 'ts_transformer'"),
    ("deeplob", ["model.n_layers=4"], "`model.n_layers` = 4 acts on ts_transformer, token_lm, mlp"),
    ("deeplob", ["model.dropout=0.1"], "`model.dropout` = 0.1 acts on ts_transformer, token_lm, mlp"),
])
def test_a_model_key_the_workload_does_not_read_is_named(name: str, override: list[str], named: str) -> None:
    """The builders of the other workloads never read the transformers' keys: `model.causal = false` on an lstm, or
    `model.n_layers = 4` on deeplob (one LSTM layer), trained the same model as without them, with no word."""
    from stride.config import load_config
    from stride.train.unused_keys import unused_keys

    assert unused_keys(load_config("configs/quickstart.toml", [f"model.name='{name}'"])) == []
    unused = unused_keys(load_config("configs/quickstart.toml", [f"model.name='{name}'", *override]))
    assert len(unused) == 1 and unused[0].startswith(named), unused
    transformer = ["model.n_heads=8", "model.ffn_mult=4.0", "model.patch_len=4", "model.causal=false",
                   "model.n_layers=4", "model.dropout=0.1"]
    assert unused_keys(load_config("configs/quickstart.toml", transformer)) == []


def test_tcn_n_layers_is_its_block_count_and_blocks_that_see_only_padding_are_refused() -> None:
    # `model.n_layers` (docs: the blocks in `model.blocks`, the unit of pipeline stages) built n_layers + 2 blocks
    assert len(build_model(small_config(model__name="tcn", model__n_layers=3).model, 5, 16, 2).blocks) == 3
    assert len(build_model(small_config(model__name="tcn", model__size="small").model, 5, 64, 2).blocks) == 5
    # 5 blocks over a 16-step window: the block dilated 16 reads no step but its own (and 1 + 2 x 2 x 31 = 125 steps
    # of receptive field over 16): refused before any training, naming the keys and the fix
    assert len(build_model(small_config(model__name="tcn", model__n_layers=4).model, 5, 16, 2).blocks) == 4
    with pytest.raises(ConfigError, match=r"`model.n_layers` = 5 tcn blocks .* `data.seq_len` = 16.*"
                                          r"set `model.n_layers` <= 4, or `data.seq_len` > 16 \(receptive field: 125"):
        build_model(small_config(model__name="tcn", model__n_layers=5).model, 5, 16, 2)


def test_deeplob_of_no_channels_is_refused_naming_the_key() -> None:
    # d_model 1: d_model // 2 = 0 channels, and torch's "input_size must be greater than zero" named no key
    with pytest.raises(ConfigError, match=r"`model.d_model` = 1 gives deeplob 0 convolution channels.*>= 2"):
        build_model(small_config(model__name="deeplob", model__d_model=1).model, 7, 16, 2)
    assert build_model(small_config(model__name="deeplob", model__d_model=2).model, 7, 16, 2)(
        torch.randn(2, 16, 7)).shape == (2, 2)


def test_deeplob_forecasts_from_the_whole_window_and_nothing_after_it() -> None:
    """Documented: its two centred 3-step convolutions over time let a step's state read up to two steps ahead inside
    the window (as DeepLOB's do), and the forecast reads every step of the window. Steps after the window do not
    enter: at the window's edge the convolutions read padding where a longer input would give them those steps.
    (This test compared the forecasts of two identical slices, which could not fail.)"""
    torch.manual_seed(0)
    model = build_model(small_config(model__name="deeplob").model, 8, 12, 2).double().eval()
    x = torch.randn(2, 12, 8, dtype=torch.float64)
    state = _per_step_state(model, "deeplob", x)
    for t in range(3, 12):  # a change at step t moves the state from step t - 2 on, nothing before it
        moved = x.clone()
        moved[:, t] += 7.0
        after = _per_step_state(model, "deeplob", moved)
        assert torch.equal(after[:, : t - 2], state[:, : t - 2])
        assert not torch.allclose(after[:, t - 2], state[:, t - 2])
    window = 9
    forecast = model(x[:, :window])
    for t in range(window):  # every step of the window reaches the forecast, the first and the last included
        moved = x.clone()
        moved[:, t] += 7.0
        assert not torch.allclose(model(moved[:, :window]), forecast)
    # steps 9 and 10 after the window: the full 12-step input's state at the window's last step reads them ...
    later = x.clone()
    later[:, window:] += 7.0
    assert not torch.allclose(_per_step_state(model, "deeplob", later)[:, window - 1], state[:, window - 1])
    # ... the window's own state there reads padding instead (it differs from the 12-step input's), and the forecast
    # is the head on that state: what follows the window never enters it
    own = _per_step_state(model, "deeplob", x[:, :window])
    torch.testing.assert_close(own[:, : window - 2], state[:, : window - 2], rtol=1e-12, atol=1e-12)
    assert not torch.allclose(own[:, window - 1], state[:, window - 1])
    torch.testing.assert_close(forecast, model.head(own[:, window - 1]), rtol=1e-12, atol=1e-12)


def test_token_lm_logits_ignore_later_tokens_exactly_in_float64() -> None:
    torch.manual_seed(0)
    model = build_model(small_config(model__name="token_lm").model, 11, 12, 0).double().eval()
    tokens = torch.randint(0, 11, (3, 12))
    logits = model(tokens)
    for t in range(11):
        later = tokens.clone()
        later[:, t + 1:] = (later[:, t + 1:] + 3) % 11
        assert torch.equal(model(later)[:, : t + 1], logits[:, : t + 1])
        torch.testing.assert_close(model(tokens[:, : t + 1]), logits[:, : t + 1], rtol=1e-12, atol=1e-12)
