# Issue #12's measuring call on the GPU machine (docs/performance.md): peak
# memory against gsplat_train.py at equal splat counts (seeds = cap, so the
# count is N from the first step to the last), float32 and --compact, then
# memory_bench at full size. Run from the project root there, carrying
# .device and build (see gpu_measure.sh):
#     bash -c 'source benchmarks/gpu_memory.sh' 2>&1 | tee $OUT/log.txt
# About 9 minutes on an H200 (the compact memory_max_splats search: run it
# in a call of its own, `-k "max_splats and compact"`, ~2.5 min).
source benchmarks/gpu_setup.sh || return 1
peaks() {  # $1: seed density (x the demo's ~6,000 points)
    python3 benchmarks/make_scene.py $L/scene1080 --density $1 --points-only | tail -1
    N=$(grep -vc "^#" $L/scene1080/points3D.txt)
    stamp "equal count N=$N"
    python3 .device/gsplat_train.py --data $L/scene1080 --strategy mcmc --cap-max $N --steps 1000 --json /tmp/g_$N.json > /dev/null 2>&1
    for mode in compact no-compact; do
        python3 -m spirula train $L/scene1080 --iterations 1000 --cap-max $N --background black --$mode \
            --output /tmp/s_${N}_$mode > /dev/null 2>&1
        python3 - /tmp/g_$N.json /tmp/s_${N}_$mode/metrics.json $N $mode <<'PY'
import json, sys
g, s = (json.load(open(p)) for p in sys.argv[1:3])
gm = g["peak_mem_bytes"] / 2**20
print("N=%s %s: gsplat %.0f MiB, %.2f ms/step | spirula pool %.0f MiB (process %s MiB), worst %.3f, %s splats, "
      "%.2f/%.2f ms/step median/mean, PSNR %.3f (gsplat %.3f) | ratio %.3f"
      % (sys.argv[3], sys.argv[4], gm, g["ms_per_step_median"], s["peak_vram_mib"], s["process_vram_mib"],
         s["pool_worst_ratio"], s["n_splats"], s["ms_per_step_median"], s["ms_per_step_mean"], s["psnr"], g["psnr"],
         s["peak_vram_mib"] / gm))
PY
    done
}
peaks 17
peaks 50
peaks 170
stamp memory_bench
python3 benchmarks/make_scene.py $L/scene1080 --density 17 --points-only | tail -1
timeout 300 python3 -m pytest benchmarks/test_memory_bench.py --benchmark-only --bench-full --bench-scene $L/scene1080 \
    -s -q -p no:cacheprovider --bench-json ${OUT:-/tmp}/membench.json -k "not compact or per_splat" 2>&1 \
    | grep -o "\[bench\] memory.*\|[0-9]* passed.*"
stamp done
