# Issue #46's long-run quality runs on the GPU machine: the object-centric
# scene of make_scene.py --object, trained to STEPS (30,000) by every config of
# CONFIGS (quality_sweep.py's --config arguments) over SEEDS, PARALLEL runs at
# a time on the one GPU, test PSNR every 2,500 steps. The tree at BEFORE
# (benchmarks/device_kit.sh) is unpacked to /tmp/before for `+tree=/tmp/before`.
# Runs still going after SWEEP_S seconds are stopped; their curves so far are
# printed all the same. Before the sweep: TESTS (pytest arguments) and
# STEP_RUN with STEP_CONFIGS (benchmarks/step_compare.py). Run from the project root there, carrying .device and build:
#     CONFIGS="--config f32:compact=false --config old:+tree=/tmp/before" \
#         bash -c 'source benchmarks/gpu_long_quality.sh' 2>&1 | tee $OUT/log.txt
set -o pipefail
WITH_GSPLAT=${WITH_GSPLAT:-0} source benchmarks/gpu_setup.sh || return 1
RES=${RES:-128}
SCENE=/tmp/obj$RES
stamp scene
[ -d $SCENE ] || python3 benchmarks/make_scene.py $SCENE --object --width $RES --height $RES --views 96 \
    --density ${DENSITY:-8} --supersample 3 --format png | tail -1
if [ -f $L/before.tar.gz ]; then rm -rf /tmp/before && mkdir -p /tmp/before && tar xzf $L/before.tar.gz -C /tmp/before; fi
if [ -n "${TESTS:-}" ]; then
    stamp tests
    # shellcheck disable=SC2086
    timeout ${TESTS_S:-150} python3 -m pytest -q -p no:cacheprovider $TESTS 2>&1 | tail -${TESTS_LINES:-6}
fi
if [ -n "${STEP_RUN:-}" ]; then
    # step_compare.py on a run folder carried in .device/local (its dataset where its config says)
    stamp step_compare
    # shellcheck disable=SC2086
    timeout ${STEP_S:-150} python3 benchmarks/step_compare.py $STEP_RUN $STEP_CONFIGS --inflate ${INFLATE:-5}
fi
[ -n "${CONFIGS:-}" ] || { stamp done; return 0; }
stamp sweep
# shellcheck disable=SC2086
timeout ${SWEEP_S:-480} python3 benchmarks/quality_sweep.py $SCENE --iterations ${STEPS:-30000} \
    --cap-max ${CAP:-1000000} --seeds ${SEEDS:-0} --parallel ${PARALLEL:-4} --eval-every ${EVAL_EVERY:-2500} \
    --workdir /tmp/qs --json ${OUT:-/tmp}/sweep.json $CONFIGS ${GSPLAT:+--gsplat .device/gsplat_train.py}
stamp curves
for d in /tmp/qs/*/; do
    echo "$(basename $d): $(grep -o 'step  *[0-9]*[: ].*test PSNR [0-9.]*' $d/log.txt | sed 's/loss [0-9.]* *//; s/: test PSNR/:/; s/test PSNR //; s/step  */s/' | tr '\n' ' ')"
    grep -m1 "Error\|error" $d/log.txt
done
stamp done
