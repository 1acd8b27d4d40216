#!/usr/bin/env bash
# The GPU machine's check (issue 15; first run on an H200 on 2026-12-04), about 8 minutes on one H200, no network, no download:
#   1. python -m esp.bench costs: the forward cost curve, the engine's per-step overhead and the mask builders on
#      random-weight 8B-shaped models in bf16;
#   2. python -m esp.bench verdict --random: a random-weight Llama-3.2-1B-shaped model, every method exact in
#      float32 and without failure in bfloat16, alone and in batches of 4;
#   3. python -m scripts.count_syncs --cuda: host syncs per step, cross-checked with torch's sync debug mode;
#   4. python -m scripts.gpu_batch: every method's batch of 8 rows against each prompt decoded alone,
#      model.generate(custom_generate=...) against plain model.generate for esp, hybrid:bc=auto and pld (fp32), and
#      the app's views' cost per step (bf16);
#   5. the app's GPU functions under the real `spaces` package, when it is installed (pytest -m zerogpu).
# JSON goes to $OUT if set, else out/. Usage, from anywhere: bash scripts/gpu_check.sh
set -u
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
DIR="${OUT:-out}"
mkdir -p "$DIR"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
status=0
run() { echo "== $*"; timeout "$1" "${@:2}" || { echo "FAILED ($?): ${*:2}"; status=1; }; }
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA'; print(torch.cuda.get_device_name(), torch.__version__)" || exit 1
run 300 "$PY" -m esp.bench costs --json "$DIR/gpu_costs.json"
# One dtype a run: both in one run took longer than 180 s on an H200 (2026-12-04), and each writes its own file.
run 150 "$PY" -m esp.bench verdict --random --dtypes float32 --json "$DIR/gpu_verdict_fp32.json"
run 240 "$PY" -m esp.bench verdict --random --dtypes bfloat16 --json "$DIR/gpu_verdict_bf16.json"
run 60 "$PY" -m scripts.count_syncs --cuda --json "$DIR/gpu_syncs.json"
run 180 "$PY" -m scripts.gpu_batch --json "$DIR/gpu_batch.json"
if "$PY" -c "import spaces" 2>/dev/null; then
    run 120 "$PY" -m pytest -m zerogpu -q -p no:cacheprovider
else
    echo "spaces not installed: skipped"
fi
exit $status
