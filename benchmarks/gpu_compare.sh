# Before/after in one GPU call (issue #10's constraint, both backends since
# issue #36): raster_bench, fpbo_bench and the 1080p training step time of
# the tree in BEFORE_TAR (default .device/local/before.tar.gz: the commit
# before the change) and of this tree, interleaved, on each backend of
# BACKENDS (default "vulkan cuda"; the before tree's CUDA library from
# BEFORE_CUDA_LIB, built here with its own scripts/build_cuda.sh). Source on
# the GPU machine from the project root, carrying .device and build:
#     BEFORE_TAR=.device/local/before36.tar.gz BEFORE_CUDA_LIB=build/before36/libspirula_cuda.so \
#         bash -c 'source benchmarks/gpu_compare.sh' 2>&1 | tee $OUT/log.txt
set -o pipefail
source benchmarks/gpu_setup.sh || return 1
# pure-Python wheels the GPU machine lacks (tqdm), importable from .device/local/wheels
for w in $L/wheels/*.whl; do [ -f "$w" ] && export PYTHONPATH=$w:$PYTHONPATH; done
AFTER=$PWD
AFTER_CUDA_LIB=$SPIRULA_CUDA_LIB
BEFORE_CUDA_LIB=$(realpath "${BEFORE_CUDA_LIB:-$AFTER_CUDA_LIB}")
BEFORE=/tmp/before; rm -rf $BEFORE; mkdir -p $BEFORE; tar xzf ${BEFORE_TAR:-$L/before.tar.gz} -C $BEFORE
BACKENDS=${BACKENDS:-"vulkan cuda"}
# in_tree DIR CUDA_LIB CMD...: CMD in the checkout DIR, its CUDA library CUDA_LIB
in_tree() { (cd "$1" && export SPIRULA_CUDA_LIB=$2 && shift 2 && PYTHONPATH=$PWD:$PYTHONPATH "$@"); }
bench() { in_tree "$1" "$2" timeout 200 python3 -m pytest benchmarks/test_raster_bench.py benchmarks/test_fpbo_bench.py --benchmark-only --bench-full --bench-backend "$3" -s -q -p no:cacheprovider 2>&1 | grep -o "\[bench\].*\|[0-9]* failed.*"; }
S="train $L/scene1080 --iterations ${ITERS:-1000} --cap-max 1000000 --background black"
train() { in_tree "$1" "$2" python3 -m spirula --backend "$3" $S --output /tmp/run_$4_$3 2>&1 | tail -2 | head -1; python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print({k: m.get(k) for k in ('ms_per_step_median', 'ms_per_step_mean', 'n_splats', 'psnr')})" /tmp/run_$4_$3/metrics.json; }
stamp points; python3 benchmarks/make_scene.py $L/scene1080 --density 170 --points-only | tail -1
for backend in $BACKENDS; do
  for round in $(seq ${ROUNDS:-1}); do
    stamp "bench before $backend ($round)"; bench $BEFORE "$BEFORE_CUDA_LIB" $backend
    stamp "bench after $backend ($round)"; bench $AFTER "$AFTER_CUDA_LIB" $backend
  done
done
for backend in $BACKENDS; do
  stamp "train before $backend"; train $BEFORE "$BEFORE_CUDA_LIB" $backend before
  stamp "train after $backend"; train $AFTER "$AFTER_CUDA_LIB" $backend after
done
stamp done
