# rasterize_bwd's BWD_REDUCE A/B in one GPU call (issue #16 item 3): raster_bench
# (2M-splat slab, both reductions interleaved twice) on Vulkan and CUDA, then the
# 1080p training step with each (TrainConfig.bwd_reduce) on Vulkan, then the CUDA
# parity of rasterize_bwd in both modes. Source on the GPU machine from the
# project root, carrying .device and build:
#     bash -c 'source benchmarks/gpu_bwd_reduce.sh' 2>&1 | tee $OUT/log.txt
set -o pipefail
source benchmarks/gpu_setup.sh || return 1
for w in $L/wheels/*.whl; do [ -f "$w" ] && export PYTHONPATH=$w:$PYTHONPATH; done
MODES=subgroup,workgroup,subgroup,workgroup
for backend in vulkan cuda; do
  stamp "raster_bench $backend"
  timeout 240 python3 -m pytest benchmarks/test_raster_bench.py --benchmark-only --bench-full -s -q \
    -p no:cacheprovider --bench-backend $backend --bench-bwd-reduce $MODES 2>&1 | grep -o "\[bench\].*"
done
stamp points; python3 benchmarks/make_scene.py $L/scene1080 --density 170 --points-only | tail -1
S="train $L/scene1080 --iterations ${ITERS:-3000} --cap-max 1000000 --background black"
for mode in subgroup workgroup; do
  stamp "train $mode"
  python3 -m spirula $S --set bwd_reduce=$mode --output /tmp/run_$mode 2>&1 | tail -2 | head -1
  python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print({k: v for k, v in m.items() if k not in ('per_image', 'relocated_by_step')})" /tmp/run_$mode/metrics.json
done
stamp "cuda parity"; timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_cuda_parity.py -k rasterize_bwd 2>&1 | tail -3
stamp done
