#!/usr/bin/env bash
# One prepared GPU session (about 10 minutes): the gpu-marked tests, the engine terms of issue 23 (ZeRO-3 with and
# without offload, QLoRA with real bitsandbytes, DDP, FSDP1: benchmarks/gpu_engines.py, allocated, reserved and the
# allocator's segments per rank), then predicted-vs-measured memory on real model shapes built from their
# config.json (random weights, 3 real steps each). Results land in $OUT (or benchmarks/results/ when OUT is unset).
# Missing pure-Python dependencies may be supplied as wheels in .whl/.
set -u
OUT=${OUT:-benchmarks/results}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
unset FINETUNE_DOCTOR_NO_NVML
{
  date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)"
  python3 -c "import deepspeed; print('deepspeed', deepspeed.__version__)" 2>&1 | tail -1
  python3 -c "import bitsandbytes; print('bitsandbytes', bitsandbytes.__version__)" 2>&1 | tail -1
  python3 -m finetune_doctor.cli gpus 2>&1 | head -30
} 2>&1 | tee "$OUT/env.txt"
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_probe_gpu.py tests/test_gpu_nvml.py \
  tests/test_gpu_engines.py 2>&1 | tee "$OUT/pytest_gpu.txt"
timeout "${ENGINES_S:-300}" python3 benchmarks/gpu_engines.py --budget-s "$(( ${ENGINES_S:-300} - 20 ))" \
  --out-dir "$OUT" 2>&1 | tee "$OUT/gpu_engines.log"
timeout "${MEASURE_S:-150}" python3 benchmarks/gpu_measure.py --budget-min "${BUDGET_MIN:-2.0}" --force \
  --order "${ORDER:-1,6,11,13,14}" --out-dir "$OUT" 2>&1 | tee "$OUT/gpu_measure.log"
echo "done $(date -u)"
