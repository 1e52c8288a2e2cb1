"""A config file for a run of a few seconds (the tiny MLP on synthetic data, 4 steps, 1 thread), for tests that run
`stride train` on a file and look at what it does to folders, not at what it trains."""

MLP_TINY_TOML = """[model]
name = "mlp"
size = "tiny"
[data]
n_assets = 4
n_steps = 1024
seq_len = 8
horizons = [1, 5]
[train]
steps = 4
batch_size = 32
val_every = 0
threads = 1
[metrics]
progress = false
flops = false
"""
