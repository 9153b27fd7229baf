# The measuring call of docs/performance.md, on the GPU machine: CUDA parity
# tests, raster_bench and fpbo_bench against gsplat's peer scripts, and the
# 1080p training benchmark against gsplat_train.py. Run from the project root
# there, carrying .device (the kit of ../shared/device, plus .device/local:
# the patched kp source as kp-0.9.0-spirula.tar.gz, glslangValidator in bin/,
# the scene of `benchmarks/make_scene.py .device/local/scene1080`) and build:
#     bash -c 'source benchmarks/gpu_measure.sh' 2>&1 | tee $OUT/log.txt
# benchmarks/gpu_setup.sh prepares the machine (kp, gsplat, paths).
set -o pipefail
source benchmarks/gpu_setup.sh || return 1
summary() { python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print({k: v for k, v in m.items() if k != 'per_image'})" "$1"; }
stamp points; python3 benchmarks/make_scene.py $L/scene1080 --density 170 --points-only | tail -1
stamp tests; timeout 120 python3 -m pytest -q -p no:cacheprovider -m cuda tests 2>&1 | tail -3
stamp bench; timeout 150 python3 -m pytest benchmarks --benchmark-only --bench-full -s -q -p no:cacheprovider --bench-json ${OUT:-/tmp}/bench.json 2>&1 | grep -o "\[bench\].*"
stamp peers; python3 .device/gsplat_raster_bench.py 2>&1 | tail -14; python3 .device/gsplat_raster_bench.py --adam 2>&1 | grep "fpbo\|projection_bwd\|adam_step"
S="train $L/scene1080 --iterations 3000 --cap-max 1000000 --background black"
stamp train; SS_PROFILE=1 python3 -m spirula $S --output /tmp/run0 2>&1 | grep -v "steps/s" | sed -n "/spirula-profile/,\$p"; summary /tmp/run0/metrics.json
for seed in 1 2; do stamp "train seed $seed"; python3 -m spirula $S --output /tmp/run$seed --seed $seed 2>&1 | tail -2 | head -1; done
stamp gsplat_train; python3 .device/gsplat_train.py --data $L/scene1080 --strategy mcmc --cap-max 1000000 --steps 3000 2>&1 | tail -1
stamp done
