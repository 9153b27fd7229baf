#!/usr/bin/env bash
# Builds the CUDA backend, build/libspirula_cuda.so (`make cuda`; `make install`
# runs it last). First it generates from the shaders, into build/contracts/,
# each kernel's contract header <kernel>.h (spirula/contract/headers.py) and
# each single-source kernel's entry point <kernel>.cu (spirula/contract/cuda_entry.py);
# then it compiles those and the hand-written twins native_cuda/*.cu. Optional:
# without nvcc, or when the build fails, it prints one line and exits 0, and
# the Vulkan backend is unaffected. Skips the build when the sources, the
# shaders, the flags and nvcc are unchanged.
#
#   NVCC=/path/to/nvcc        compiler (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc)
#   PYTHON=/path/to/python    runs the generator (default: .venv/bin/python, else python3)
#   SPIRULA_CUDA_ARCHS="75 80 86 89 90"   SASS targets; PTX for the last one is added
#   SPIRULA_CUDA_JOBS=N       parallel compiles (default: the number of cores)
set -uo pipefail
cd "$(dirname "$0")/.."

OUT=build/libspirula_cuda.so
LOG=build/cuda_build.log
STAMP=build/libspirula_cuda.stamp

skip() {
  rm -f "$OUT" "$STAMP"     # never leave a library that does not match the sources
  echo "spirula: CUDA backend not built: $1; the Vulkan backend is unaffected"
  exit 0
}

NVCC=${NVCC:-$(command -v nvcc || true)}
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
if [ -z "$NVCC" ] || [ ! -x "$NVCC" ]; then
  echo "spirula: CUDA backend not built: nvcc not found (install the CUDA toolkit, or set NVCC); the Vulkan backend is unaffected"
  exit 0
fi

ARCHS=${SPIRULA_CUDA_ARCHS:-"75 80 86 89 90"}
GENCODE=()
last=""
for a in $ARCHS; do GENCODE+=(-gencode "arch=compute_$a,code=sm_$a"); last=$a; done
GENCODE+=(-gencode "arch=compute_$last,code=compute_$last")
# The shaders' arithmetic, so CUDA and Vulkan results stay close: IEEE
# multiplies and adds, no --use_fast_math (its flush to zero and approximate
# exp/log), and division and sqrt at SPIR-V's precision (x / y within 2.5 ULP,
# sqrt as 1 / inversesqrt; -prec-div=false -prec-sqrt=false) instead of nvcc's
# correctly rounded ones, whose slow paths made fpbo's training variant 1.5x
# slower (notes/performance-history.md, "What fpbo's compact rows spent").
# shaders/include: the maths shared with the shaders (dialect.glsl)
CONTRACTS=build/contracts
FLAGS=(-std=c++17 -O3 -prec-div=false -prec-sqrt=false -Xcompiler -fPIC -Xcompiler -fvisibility=hidden -Inative_cuda -I"$CONTRACTS" -Ishaders/include "${GENCODE[@]}")

mkdir -p build

# The contracts and the single-source kernels' entry points come from the
# shaders: generated with this checkout's spirula (PYTHONPATH), rewritten only
# where they changed.
PYTHON=${PYTHON:-.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=$(command -v python3 || true)
[ -n "$PYTHON" ] || skip "no Python to generate the kernel contracts (set PYTHON)"
for gen in headers cuda_entry; do
  if ! gen_err=$(PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m spirula.contract.$gen "$CONTRACTS" 2>&1); then
    skip "contract generation failed: $(echo "$gen_err" | tail -n1 | cut -c1-200)"
  fi
done
SOURCES=(native_cuda/*.cu "$CONTRACTS"/*.cu)
[ -e "${SOURCES[0]}" ] || skip "no sources in native_cuda/"

key=$( { "$NVCC" --version; echo "${FLAGS[*]}"; cat native_cuda/*.cu native_cuda/common/*.cuh shaders/*.comp \
         shaders/include/*.glsl "$CONTRACTS"/*.h "$CONTRACTS"/*.cu "$0"; } | sha256sum | cut -c1-32)
if [ -s "$OUT" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$key" ]; then
  exit 0
fi

OBJ=$(mktemp -d build/cuda_obj.XXXXXX)
trap 'rm -rf "$OBJ"' EXIT
JOBS=${SPIRULA_CUDA_JOBS:-$(nproc 2>/dev/null || echo 2)}
t0=$(date +%s)
: > "$LOG"
# One nvcc per source, JOBS at a time; each writes its own log.
printf '%s\n' "${SOURCES[@]}" | xargs -P "$JOBS" -I{} sh -c '
  src="$1"; shift; obj="$0/$(basename "$src" .cu).o"
  "$@" -c "$src" -o "$obj" > "$obj.log" 2>&1 || { echo "FAILED $src" >> "$obj.log"; exit 1; }
' "$OBJ" {} "$NVCC" "${FLAGS[@]}"
status=$?
cat "$OBJ"/*.log >> "$LOG" 2>/dev/null
if [ $status != 0 ]; then
  first=$(grep -m1 -E 'error|FAILED' "$LOG" | cut -c1-200)
  skip "nvcc failed (${first:-see $LOG}; full log in $LOG)"
fi
# Link: cudart static (the library needs only the driver, libcuda.so.1, at run
# time); its symbols stay hidden, so only the kernels and spirula_cuda_* are exported.
if ! "$NVCC" -shared -o "$OUT.tmp" "$OBJ"/*.o -Xlinker --exclude-libs,ALL >> "$LOG" 2>&1; then
  skip "linking failed (see $LOG)"
fi
mv -f "$OUT.tmp" "$OUT"
echo "$key" > "$STAMP"
echo "spirula: built $OUT (${#SOURCES[@]} sources, sm_${ARCHS// /, sm_} + compute_$last PTX) in $(( $(date +%s) - t0 )) s"
