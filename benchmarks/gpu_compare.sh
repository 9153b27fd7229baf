# Before/after in one GPU call (issue #10's constraint): raster_bench,
# fpbo_bench and the 1080p training step time of the tree in
# .device/local/before.tar.gz (the commit before the change) and of this
# tree, interleaved, then the CUDA parity tests of this tree. Source on the
# GPU machine from the project root, carrying .device and build:
#     bash -c 'source benchmarks/gpu_compare.sh' 2>&1 | tee $OUT/log.txt
set -o pipefail
source benchmarks/gpu_setup.sh || return 1
# pure-Python wheels the GPU machine lacks (tqdm), importable from .device/local/wheels
for w in $L/wheels/*.whl; do [ -f "$w" ] && export PYTHONPATH=$w:$PYTHONPATH; done
AFTER=$PWD
BEFORE=/tmp/before; rm -rf $BEFORE; mkdir -p $BEFORE; tar xzf $L/before.tar.gz -C $BEFORE
in_tree() { (cd "$1" && shift && PYTHONPATH=$PWD:$PYTHONPATH "$@"); }
bench() { in_tree "$1" timeout 200 python3 -m pytest benchmarks/test_raster_bench.py benchmarks/test_fpbo_bench.py --benchmark-only --bench-full -s -q -p no:cacheprovider 2>&1 | grep -o "\[bench\].*"; }
S="train $L/scene1080 --iterations ${ITERS:-3000} --cap-max 1000000 --background black"
train() { in_tree "$1" python3 -m spirula $S --output /tmp/run_$2 2>&1 | tail -2 | head -1; python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print({k: v for k, v in m.items() if k not in ('per_image', 'relocated_by_step')})" /tmp/run_$2/metrics.json; }
stamp points; python3 benchmarks/make_scene.py $L/scene1080 --density 170 --points-only | tail -1
for round in 1 2; do
  stamp "bench before ($round)"; bench $BEFORE
  stamp "bench after ($round)"; bench $AFTER
done
stamp "train before"; train $BEFORE before
stamp "train after"; train $AFTER after
stamp "cuda parity (after)"; timeout 150 python3 -m pytest -q -p no:cacheprovider -m cuda tests 2>&1 | tail -3
stamp done
