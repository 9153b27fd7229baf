# Issue #16's training-speed table on the GPU machine: the three regimes of
# benchmarks/test_train_bench.py (256^2 with 100k splats, 256^2 with 1M, 1080p
# with 1M), each timed for this tree (Vulkan, with the per-kernel profile, and
# CUDA), for the tree before the change ($L/before.tar.gz, Vulkan) and for
# gsplat_train.py with and without SSIM, all in one call. Run from the project
# root there, carrying .device (with .device/local/scene1080) and the CUDA
# library (SPIRULA_CUDA_LIB):
#     REGIMES="s256 d256" STEPS=1000 bash -c 'source benchmarks/gpu_regimes.sh' 2>&1 | tee $OUT/log.txt
# One JSON per (regime, tree, backend) lands in $OUT.
set -o pipefail
source benchmarks/gpu_setup.sh || return 1
for w in $L/wheels/*.whl; do [ -f "$w" ] && export PYTHONPATH=$w:$PYTHONPATH; done
REGIMES=${REGIMES:-"s256 d256 hd1080"}
export SPIRULA_BENCH_SCENES=/tmp/spirula-bench-scenes
mkdir -p $SPIRULA_BENCH_SCENES
if [ -d $L/scene1080 ] && [ ! -e $SPIRULA_BENCH_SCENES/hd1080_1920x1080_v48_d170 ]; then
    python3 benchmarks/make_scene.py $L/scene1080 --density 170 --points-only | tail -1
    ln -s $L/scene1080 $SPIRULA_BENCH_SCENES/hd1080_1920x1080_v48_d170
fi
BEFORE=""
if [ -f $L/before.tar.gz ]; then BEFORE=/tmp/before; rm -rf $BEFORE; mkdir -p $BEFORE; tar xzf $L/before.tar.gz -C $BEFORE; fi
B="python3 -m pytest benchmarks/test_train_bench.py --benchmark-only --bench-full -s -q -p no:cacheprovider --bench-steps ${STEPS:-1000}"
for r in $REGIMES; do
    stamp "$r after vulkan + gsplat"
    $B -k $r --bench-gsplat .device/gsplat_train.py --bench-profile --bench-json ${OUT:-/tmp}/$r.after.vulkan.json 2>&1 \
        | grep -o "\[bench\].*\|^[a-z_]*  *[0-9].*\|Error.*\|[0-9]* failed.*"
    if [ -n "$BEFORE" ]; then
        stamp "$r before vulkan"
        SPIRULA_BENCH_TREE=$BEFORE $B -k $r --bench-json ${OUT:-/tmp}/$r.before.vulkan.json 2>&1 | grep -o "\[bench\].*\|Error.*\|spirula: error.*"
    fi
    stamp "$r after cuda"
    $B -k $r --bench-backend cuda --bench-json ${OUT:-/tmp}/$r.after.cuda.json 2>&1 | grep -o "\[bench\].*\|Error.*\|spirula: error.*"
done
stamp done
