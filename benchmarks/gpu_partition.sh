# Issue #17 item 5 on the GPU machine: the 1080p training scene trained whole,
# then in 4 blocks one after another on the one GPU (Ray's single GPU
# resource serializes them), merged and fine-tuned: wall time and memory per
# block against the whole-scene run (docs/performance.md). Run from the
# project root there, carrying .device (as for benchmarks/gpu_measure.sh,
# with .device/local/scene1080) and build:
#     bash -c 'source benchmarks/gpu_partition.sh' 2>&1 | tee $OUT/log.txt
# Ray: the device machine has no network; with .device/local/ray-site-cp312.tar.xz
# (the ray wheel for CPython 3.12 and its dependencies, unpacked and packed
# with xz) the blocks go through `spirula train --partition 4 --ray-address
# local`; without it, through `spirula partition` and one `spirula train` per
# block (the same trainer, the same files), then `spirula partition merge`.
# STEPS, CAP (the whole run's MCMC budget) and BLOCK_CAP (each block's) may be set.
set -o pipefail
source benchmarks/gpu_setup.sh || return 1
STEPS=${STEPS:-3000} CAP=${CAP:-1000000} BLOCK_CAP=${BLOCK_CAP:-360000}  # 4 blocks x 360k / 1.44 (margins) ~ 1M merged
# the scene: .device/local/scene1080 when carried (its seeds regenerated), else made here (a few minutes)
S=$L/scene1080
if [ -d $S ]; then
    stamp points; python3 benchmarks/make_scene.py $S --density 170 --points-only | tail -1
else
    S=/tmp/scene1080; stamp scene; python3 benchmarks/make_scene.py $S --density 170 | tail -1
fi
if [ -f $L/ray-site-cp312.tar.xz ]; then
    mkdir -p /tmp/site-ray && tar -xJf $L/ray-site-cp312.tar.xz -C /tmp/site-ray && export PYTHONPATH=$PYTHONPATH:/tmp/site-ray
fi
export RAY_USAGE_STATS_ENABLED=0
nvidia-smi --query-gpu=index,uuid,name --format=csv,noheader
python3 -c "from spirula.backends.vulkan.vkinfo import list_devices as l; [print('vulkan', d.index, d.name, d.device_uuid) for d in l()]"
stamp whole
python3 -m spirula train $S --iterations $STEPS --cap-max $CAP --background black --output /tmp/whole 2>&1 | tail -2 | head -1
stamp blocks
P="--iterations $STEPS --cap-max $BLOCK_CAP --background black"
if python3 -c "import ray" 2>/dev/null; then
    python3 -m spirula train $S --partition 4 --ray-address local $P --output /tmp/part 2>&1 \
        | grep -v "steps/s" | grep "spirula: block\|merged\|test PSNR\|Ray\| on Vulkan device" | tail -24
else
    echo "no ray here: blocks one after another by the CLI"
    python3 -m spirula partition $S /tmp/part/partition --blocks 4
    for b in /tmp/part/partition/block-*; do
        stamp $(basename $b)
        python3 -m spirula train $b -o /tmp/part/partition/runs/$(basename $b) --eval-split none $P 2>&1 | tail -2 | head -1
    done
    stamp merge
    python3 -m spirula partition merge /tmp/part 2>&1 | grep -v "steps/s" | tail -3
fi
stamp table
python3 - <<'EOF'
import glob, json
def row(name, m):
    print("| %s | %s | %.1f | %.1f | %s | %s |" % (name, f"{m['n_splats']:,}", m["training_time_s"], m["ms_per_step_median"] or 0,
          "%.0f" % m["peak_vram_mib"], "%.0f" % m["process_vram_mib"] if m.get("process_vram_mib") else "-"))
print("| run | splats | train s | ms/step median | pool peak MiB | process MiB |\n|---|---|---|---|---|---|")
row("whole scene", json.load(open("/tmp/whole/metrics.json")))
for f in sorted(glob.glob("/tmp/part/partition/runs/block-*/metrics.json")):
    row(f.split("/")[-2], json.load(open(f)))
m = json.load(open("/tmp/part/metrics.json"))
row("merged fine-tune", m)
print("test PSNR: whole %.3f, partitioned %.3f (fine-tune %d steps)" % (json.load(open("/tmp/whole/metrics.json"))["psnr"], m["psnr"], m["step"]))
print(json.dumps({k: v for k, v in m["partition"].items() if k != "block_results"}))
for r in m["partition"].get("block_results", []):
    print(r["block"], r["device"])
EOF
stamp done
