#!/usr/bin/env bash
# The one prepared GPU check for stride's kernels and optimizers: run it, unchanged, on a machine
# with an NVIDIA GPU, from the repository root, and keep what it writes.
#
#   bash benchmarks/gpu_check.sh [--budget-s 560] [--out DIR] [--cpu-dry-run] [--skip STEP,...]
#   bash benchmarks/gpu_check.sh --fetch-wheels   # here, before: the comparison packages into .whl/
#
# Steps, each under its share of one total time budget (a step that would overrun is cut off by
# `timeout` and the next one still runs):
#   1. set-up: the packages the comparisons need. Wheels in .whl/ (carried to an offline machine,
#      see docs/kernels.md) are installed into a private folder with pip --no-index --no-deps; else,
#      if pip can reach an index, the `compare` extra and liger-kernel; else the rows say "skipped".
#      Torch is never installed or replaced: the machine's CUDA build is used as it is.
#   2. the trainer's CUDA timing path and MFU on tiny runs (fp32 torch ops + AdamW; bf16 Triton ops +
#      8-bit AdamW): step time, its breakdown, MFU, losses. Then benchmarks/checkpoint.py with the model
#      on the GPU (staging is a device-to-host copy) and benchmarks/data_loader.py on this host's cores
#      (the loader's speedup over a plain DataLoader where memory bandwidth is higher), 45 s each; then
#      benchmarks/data_device.py: an 800 MiB store's windows gathered on the GPU (`data.device_resident`)
#      against its own device-to-device copy (goal >= 0.5), 40 s.
#   3. benchmarks/kernels.py --results benchmarks/RESULTS.md: every kernel against eager, compile and
#      Liger, and the optimizers (stride fused / 8-bit Triton against torch fused, bitsandbytes, torchao);
#      it gets what is left of the budget but 190 s (and stops starting cases after at most 420 s).
#   4. benchmarks/optimizers.py on the GPU (step time, state bytes, drift; no training runs).
#   4b. benchmarks/sweep_packing.py: 64 packed models of mlp_tiny, lstm_small, ts_transformer_tiny against
#      the same models one after another (goal: 10x at N=64), 100 s (reserved out of step 3's share).
#   5. the optimizer and kernel tests on the GPU (they run the Triton kernels natively there), the
#      device-resident windows' tests (identical batches, exact resume on the device), the device choice, and
#      async saves and exact resume with the model on the GPU.
# --skip names steps not to run (trainer, checkpoint, data, data_device, kernels, optimizers, sweep, tests), for
# a second call in one lease that repeats only what the first could not measure; their shares go to the kernels.
# Everything goes to DIR (default: $OUT if set, else ./gpu_check_out): one log per step and
# summary.txt, whose last lines are the kernels table. --cpu-dry-run runs each step in its CPU form
# (smoke shapes, interpreter, a few training steps) so the script itself can be tested without a GPU.
set -uo pipefail

BUDGET=560
OUTDIR="${OUT:-./gpu_check_out}"
DRY=0
FETCH=0
SKIP=","
# The comparison packages, for an offline GPU machine whose python is 3.12 (the H200 image's); none
# of them pulls torch (--no-deps), so the machine's CUDA torch stays. About 47 MB together.
WHEELS=("liger-kernel==0.8.5" "torchao==0.18.0" "bitsandbytes==0.50.2")
while [ $# -gt 0 ]; do
  case "$1" in
    --budget-s) BUDGET="$2"; shift 2 ;;
    --out) OUTDIR="$2"; shift 2 ;;
    --cpu-dry-run) DRY=1; shift ;;
    --skip) SKIP=",$2,"; shift 2 ;;
    --fetch-wheels) FETCH=1; shift ;;
    -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done

REPO="$(cd "$(dirname "$0")/.." && pwd)"
cd "$REPO" || exit 2
if [ "$FETCH" -eq 1 ]; then
  mkdir -p .whl  # ignored by git (.gitignore); carry it to the GPU machine
  for w in "${WHEELS[@]}"; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 -d .whl "$w" || echo "gpu_check.sh: could not download $w" >&2
  done
  ls -la .whl
  exit 0
fi
mkdir -p "$OUTDIR"
OUTDIR="$(cd "$OUTDIR" && pwd)"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
START=$(date +%s)
SUMMARY="$OUTDIR/summary.txt"
: > "$SUMMARY"

say() { echo "$*" | tee -a "$SUMMARY"; }
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
# run_step NAME SHARE_S CMD...: at most SHARE_S seconds and never past the total budget
run_step() {
  local name="$1" share="$2"; shift 2
  if [[ "$SKIP" == *",$name,"* ]]; then say "[$name] skipped: --skip"; return 0; fi
  local rest; rest=$(left)
  local limit=$(( share < rest ? share : rest ))
  if [ "$limit" -lt 10 ]; then say "[$name] skipped: $rest s of the budget left"; return 0; fi
  say "[$name] start, limit ${limit}s: $*"
  local t0; t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" > "$OUTDIR/$name.log" 2>&1
  local rc=$?
  say "[$name] rc=$rc after $(( $(date +%s) - t0 ))s$([ $rc -eq 124 ] && echo ' (cut off by its time limit)')"
  return 0
}

say "stride gpu_check: $(date -u +%Y-%m-%dT%H:%M:%SZ), budget ${BUDGET}s, python $PY, out $OUTDIR, dry-run $DRY"
if [ "$DRY" -eq 0 ] && ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  say "no CUDA GPU visible to $PY: nothing to measure (use --cpu-dry-run to check the script on CPU)"
  exit 0
fi
"$PY" - <<'EOF' 2>&1 | tee -a "$SUMMARY"
import platform, torch
try:
    import triton
    tv = triton.__version__
except Exception:  # noqa: BLE001
    tv = "not importable"
gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
print(f"python {platform.python_version()}, torch {torch.__version__}, triton {tv}, gpu {gpu}")
EOF
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader \
  | tee -a "$SUMMARY"

# 1. set-up ------------------------------------------------------------------------------------------
SITE=/tmp/stride-gpu-check-site
if compgen -G ".whl/*.whl" > /dev/null; then
  run_step setup 120 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" .whl/*.whl
  export PYTHONPATH="$PYTHONPATH:$SITE"  # holds only the three packages (--no-deps): torch stays the machine's
elif [ "$DRY" -eq 0 ]; then
  run_step setup 60 "$PY" -m pip install -q --no-deps --timeout 10 --retries 0 --target "$SITE" \
    torchao bitsandbytes liger-kernel
  export PYTHONPATH="$PYTHONPATH:$SITE"
else
  say "[setup] dry run, no .whl/: nothing installed (the comparison rows use whatever imports)"
fi
"$PY" - <<'EOF' 2>&1 | tee -a "$SUMMARY"
import importlib, io, contextlib
for name in ("liger_kernel", "bitsandbytes", "torchao"):
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            mod = importlib.import_module(name)
        print(f"{name}: {getattr(mod, '__version__', '?')}")
    except Exception as exc:  # noqa: BLE001
        print(f"{name}: not importable ({type(exc).__name__}: {str(exc)[:80]}); its rows will be skipped")
EOF

# 2. the trainer on the device: CUDA timing path and MFU ------------------------------------------------
run_step trainer 75 "$PY" - "$DRY" <<'EOF'
import json, sys
from stride.config import load_config
from stride.optim.state import optimizer_state_bytes
from stride.train.trainer import Trainer
dry = sys.argv[1] == "1"
steps = 4 if dry else 60
# the dry run checks this step's code path on the CPU, where the default model takes seconds a step:
# a quarter of the batch and 4 steps (the GPU run keeps the default batch and 60 steps)
small = ["train.batch_size=16", "train.val_batches=1"] if dry else ["train.val_batches=4"]
runs = {"fp32-torch-adamw": [], "bf16-triton-adamw8bit": ["train.precision=\"bf16\"", "train.kernels=\"triton\"",
                                                         "optim.name=\"adamw8bit\""]}
for name, extra in runs.items():
    cfg = load_config(overrides=[f"train.steps={steps}", "metrics.progress=false", f"train.val_every={steps}",
                                 *small, "train.device=\"" + ("cpu" if dry else "cuda") + "\"", *extra])
    t = Trainer(config=cfg, write_run_dir=False)
    s = t.fit().summary
    row = {k: s.get(k) for k in ("steps", "step_time_s", "step_time_breakdown_s", "samples_per_s", "mfu",
                                 "achieved_flops_per_s", "peak_flops_source", "final_train_loss", "final_val_loss",
                                 "peak_mem_bytes")}
    row["kernels_impl"] = t.kernels_impl
    row["optimizer_state_bytes_per_param"] = optimizer_state_bytes(t.optimizer) / s["params"]
    print(name, json.dumps(row))
EOF

# 2b. checkpoint staging from the device (issue 5), the window loader on this many-core host (issue 3), and
# the device-resident gather (issue 20) --------------------------------------------------------------------
if [ "$DRY" -eq 0 ]; then
  run_step checkpoint 45 "$PY" benchmarks/checkpoint.py --mb 400 --repeats 3 --device cuda --json
  run_step data 60 env OMP_NUM_THREADS=1 "$PY" benchmarks/data_loader.py --mb 256 --repeats 2 --json
  # device-resident windows (issue 20): the gather on the GPU against its own copy; 800 MiB, the quant case
  run_step data_device 40 "$PY" benchmarks/data_device.py --device cuda --mb 800 --batches 256,1024,4096 --json
else
  run_step checkpoint 60 env OMP_NUM_THREADS=1 "$PY" benchmarks/checkpoint.py --mb 40 --repeats 1 --json
  run_step data 90 env OMP_NUM_THREADS=1 "$PY" benchmarks/data_loader.py --mb 16 --repeats 1 --batches 5 \
    --steps 5 --json
  run_step data_device 60 "$PY" benchmarks/data_device.py --device cpu --mb 8 --batches 64 --iters 3 --json
fi

# 3. kernels ----------------------------------------------------------------------------------------
if [ "$DRY" -eq 0 ]; then
  # kernels.py stops starting kernel cases after --budget-s and gives the optimizer rows 60 s more;
  # 190 s of the total stay for steps 4, 4b (100 s) and 5
  RESERVE=190; [[ "$SKIP" == *",optimizers,"* ]] && RESERVE=130
  KL=$(( $(left) - RESERVE )); KB=$(( KL - 60 )); [ "$KB" -gt 420 ] && KB=420; [ "$KB" -lt 60 ] && KB=60
  run_step kernels "$KL" "$PY" benchmarks/kernels.py --budget-s "$KB" --json --results benchmarks/RESULTS.md
  cp benchmarks/RESULTS.md "$OUTDIR/RESULTS.md" 2>/dev/null
else
  run_step kernels 300 env TRITON_INTERPRET=1 "$PY" benchmarks/kernels.py --cpu-smoke --only rms_norm,adamw_step --json
fi

# 4. optimizers side by side on the device --------------------------------------------------------------
if [ "$DRY" -eq 0 ]; then
  run_step optimizers 60 "$PY" benchmarks/optimizers.py --no-train --reps 10 --drift-steps 30 --json
else
  run_step optimizers 120 "$PY" benchmarks/optimizers.py --quick --no-train --only stride_adamw8bit,torch_adamw_fused --json
fi

# 4b. many small models packed on the device (issue 18) --------------------------------------------------
if [ "$DRY" -eq 0 ]; then
  run_step sweep 100 "$PY" benchmarks/sweep_packing.py --device cuda --n 64 --repeats 1 --seq-cap 4 \
    --variants packed,sequential --json
else
  # 2 models are enough to run both code paths (a pack of several models, models one after another); each
  # more model is one more Trainer in the sequential cell, seconds on CPU (tests/kernels runs this dry run)
  run_step sweep 120 "$PY" benchmarks/sweep_packing.py --n 2 --repeats 1 --warmup 1 --timed 2 --seq-cap 2 --workloads mlp_tiny \
    --variants packed,sequential --json
fi

# 5. tests on the device (the Triton kernels natively) ----------------------------------------------------
if [ "$DRY" -eq 0 ]; then
  run_step tests 150 "$PY" -m pytest -q --maxfail=20 -m "not slow" -p no:cacheprovider tests/optim tests/kernels \
    tests/data/test_data_device.py tests/train/test_device_choice.py tests/checkpoint/test_checkpoint_async.py \
    tests/checkpoint/test_checkpoint_resume.py
else
  say "[tests] dry run: not run (the CPU suite covers them)"
fi

say "total $(( $(date +%s) - START ))s of ${BUDGET}s"
for step in setup trainer checkpoint data data_device optimizers sweep tests; do  # the kernels table comes last
  [ -f "$OUTDIR/$step.log" ] || continue
  say ""
  say "== $step (last lines of $OUTDIR/$step.log) =="
  grep -v '^{' "$OUTDIR/$step.log" | tail -n 25 | tee -a "$SUMMARY"
done
# the kernels table last, as benchmarks/kernels.py prints it
if [ -f "$OUTDIR/kernels.log" ]; then
  say ""
  say "== kernels (last lines of $OUTDIR/kernels.log) =="
  grep -v '^{' "$OUTDIR/kernels.log" | tail -n 60 | tee -a "$SUMMARY"
fi
