#!/usr/bin/env bash
# The first GPU machine's check (issue 15), under 8 minutes on one H200, no network, no download:
#   1. scripts/gpu_costs.py: the forward cost curve, the engine's per-step overhead and the mask builders
#      on random-weight 8B-shaped models in bf16;
#   2. scripts/gpu_verdict.py: a random-weight Llama-3.2-1B-shaped model through the bench's verdict, every
#      method exact in float32 and without failure in bfloat16;
#   3. scripts/count_syncs.py --cuda: host syncs per step, cross-checked with torch's sync debug mode;
#   4. scripts/gpu_batch.py: every method's batch of 8 rows against each prompt decoded alone, and
#      model.generate(custom_generate=...) against plain model.generate for esp, hybrid:bc=auto and pld (fp32);
#   5. the app's GPU functions under the real `spaces` package, when it is installed (pytest -m zerogpu).
# JSON goes to $OUT if set, else out/. Usage: bash scripts/gpu_check.sh
set -u
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
DIR="${OUT:-out}"
mkdir -p "$DIR"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
status=0
run() { echo "== $*"; timeout "$1" "${@:2}" || { echo "FAILED ($?): ${*:2}"; status=1; }; }
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA'; print(torch.cuda.get_device_name(), torch.__version__)" || exit 1
run 300 "$PY" scripts/gpu_costs.py --json "$DIR/gpu_costs.json"
run 180 "$PY" scripts/gpu_verdict.py --json "$DIR/gpu_verdict.json"
run 60 "$PY" scripts/count_syncs.py --cuda --json "$DIR/gpu_syncs.json"
run 180 "$PY" scripts/gpu_batch.py --json "$DIR/gpu_batch.json"
if "$PY" -c "import spaces" 2>/dev/null; then
    run 120 "$PY" -m pytest -m zerogpu -q -p no:cacheprovider
else
    echo "spaces not installed: skipped"
fi
exit $status
