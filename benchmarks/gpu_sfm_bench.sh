# Issue #38 item 6 on the GPU machine: benchmarks/sfm_bench.py, the GPU front
# end on both backends (Vulkan, CUDA) against pycolmap's CPU path on the same
# machine. Run from the project root there, carrying .device (the kit, with
# .device/local/sfm/pycolmap-4.2.1-cp312-*.whl unless the image has pycolmap:
# `SFM=1 bash benchmarks/device_kit.sh` puts it there) and, for the CUDA rows,
# build/libspirula_cuda.so (else it is built there, with nvcc):
#     bash -c 'source benchmarks/gpu_sfm_bench.sh' 2>&1 | tee $OUT/log.txt
# What one call runs (a 600 s call holds about this much; each run's row is
# written to $OUT/sfm.json as it finishes, so a call cut short keeps them):
#     WORKLOADS="200x1920x1080"   the target workload (also 120x384x288)
#     FEATURES="gpu cpu"          GPU rows first
#     BACKENDS="vulkan cuda"
#     MAPPERS="global"            the target's mapper (also incremental)
# e.g. a second call: WORKLOADS=120x384x288 MAPPERS="global incremental".
# The frames are rendered into .cache/sfm_bench (16 processes, ~2 min at
# 1080p) and kept there while the machine stays warm.
set -o pipefail
WITH_GSPLAT=0 source benchmarks/gpu_setup.sh || return 1
if ! python3 -c "import pycolmap" 2>/dev/null; then
    stamp pycolmap
    W=$(ls $L/sfm/pycolmap-*-cp312-*.whl 2>/dev/null | head -1)
    [ -n "$W" ] || { echo "no pycolmap here and none carried in .device/local/sfm/ (SFM=1 bash benchmarks/device_kit.sh)"; return 1; }
    python3 -m pip install -q --no-deps --no-index --target /tmp/sfm-site "$W" || return 1
    export PYTHONPATH=/tmp/sfm-site:$PYTHONPATH
fi
python3 -c "import pycolmap; print('pycolmap', pycolmap.__version__)"
if [[ " ${BACKENDS:-vulkan cuda} " == *" cuda "* ]] && [ ! -f "$SPIRULA_CUDA_LIB" ]; then
    stamp "build cuda"
    SPIRULA_CUDA_ARCHS=90 bash scripts/build_cuda.sh | tail -1
    export SPIRULA_CUDA_LIB=$PWD/build/libspirula_cuda.so
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
stamp sfm_bench
W=()
for w in ${WORKLOADS:-200x1920x1080}; do W+=(--workload "$w"); done
python3 benchmarks/sfm_bench.py "${W[@]}" --features ${FEATURES:-gpu cpu} --backend ${BACKENDS:-vulkan cuda} \
    --mapper ${MAPPERS:-global} --jobs $(nproc) --json ${OUT:-/tmp}/sfm.json 2>&1 | grep -v "^spirula: sfm "
stamp done
