#!/usr/bin/env bash
# Prepares, on this machine, what the GPU-machine scripts (gpu_setup.sh,
# gpu_measure.sh, gpu_regimes.sh) expect to be carried in .device/ and build/:
#   .device/            the kit of ../shared/device (prepare.sh)
#   .device/local/kp-0.9.0-spirula.tar.gz   kp's sdist with third_party/kompute's patch
#   .device/local/bin/glslangValidator      the shader compiler Spirula runs
#   .device/local/bin/pipeline_stats        benchmarks/pipeline_stats.c (the GPU machine has no Vulkan headers)
#   .device/local/before.tar.gz             (BEFORE=REV) the tree at REV, for "before" rows
#   .device/local/scene1080                 (SCENE1080=1) the 1080p training scene, images only
#   build/libspirula_cuda.so                the CUDA backend for the H200 only (sm_90: small to carry)
#   .device/local/sfm/pycolmap-*-cp312-*.whl   (SFM=1) pycolmap for benchmarks/gpu_sfm_bench.sh, the
#                                           version of .venv's, 38 MB: carry .device without rs/ and
#                                           before.tar.gz, and let that script build the CUDA library there
# Run from the project root after `make install`:
#     BEFORE=531b635 SCENE1080=1 bash benchmarks/device_kit.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash ../shared/device/prepare.sh
L=.device/local
mkdir -p $L/bin
# the patched sdist, and the kp module an earlier call built from it, follow the patch
PATCH_SUM=$(sha256sum third_party/kompute/kp-0.9.0-spirula.patch | cut -c1-16)
if [ "$(cat $L/kp-patch.sum 2>/dev/null)" != "$PATCH_SUM" ]; then
    rm -f $L/kp-0.9.0-spirula.tar.gz $L/kp.cpython-*.so
    echo "$PATCH_SUM" > $L/kp-patch.sum
fi
if [ ! -f $L/kp-0.9.0-spirula.tar.gz ]; then
    T=$(mktemp -d)
    tar xzf .cache/kp/kp-0.9.0.tar.gz -C "$T"
    patch -s -p1 -d "$T/kp-0.9.0" < third_party/kompute/kp-0.9.0-spirula.patch
    tar czf $L/kp-0.9.0-spirula.tar.gz -C "$T" kp-0.9.0
    rm -rf "$T"
fi
cp -f "$(command -v glslangValidator)" $L/bin/
cc -O1 -o $L/bin/pipeline_stats benchmarks/pipeline_stats.c -lvulkan
if [ -n "${BEFORE:-}" ]; then
    git archive --format=tar.gz -o $L/before.tar.gz "$BEFORE" spirula shaders native_cuda scripts pyproject.toml
fi
if [ "${SCENE1080:-0}" = 1 ] && [ ! -d $L/scene1080 ]; then
    .venv/bin/python benchmarks/make_scene.py $L/scene1080
    rm -f $L/scene1080/points*  # regenerated there (carry limit)
fi
if [ "${SFM:-0}" = 1 ] && ! ls $L/sfm/pycolmap-*-cp312-*.whl >/dev/null 2>&1; then
    V=$(.venv/bin/python -c "import pycolmap; print(pycolmap.__version__)")
    .venv/bin/python -m pip download -q "pycolmap==$V" --no-deps --only-binary :all: \
        --python-version 3.12 --platform manylinux_2_28_x86_64 -d $L/sfm
fi
SPIRULA_CUDA_ARCHS=90 bash scripts/build_cuda.sh
du -sh .device build/libspirula_cuda.so
