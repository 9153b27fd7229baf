# Source on the GPU machine, from the project root, carrying .device and
# build: kp (patched, from .device/local), gsplat (WITH_GSPLAT=0: not), the CUDA library and the
# project on the paths, and stamp() for timed log sections.
#     source benchmarks/gpu_setup.sh && ...
# A first call builds kp there (about a minute) and copies it to $OUT:
# put it into .device/local/ and later calls load it instead.
export PYTHONUNBUFFERED=1
T0=$(date +%s)
stamp() { echo "=== $1 (t=$(( $(date +%s) - T0 )) s)"; }
L=$PWD/.device/local
# the patched kp: the module built by an earlier call, else built from the patched sdist
export DEVICE_KP_SO=$L/kp.cpython-312-x86_64-linux-gnu.so DEVICE_KP_SRC=$L/kp-0.9.0-spirula.tar.gz
export DEVICE_EXPORT=${OUT:-/tmp/device-export}
[ -f "$L/gsplat_cuda.so.xz" ] && export DEVICE_GSPLAT_SO=$L/gsplat_cuda.so.xz
WITH_GSPLAT=${WITH_GSPLAT:-1} source .device/setup.sh || return 1
export PYTHONPATH=$PWD:$PYTHONPATH PATH=$L/bin:$PATH SPIRULA_CUDA_LIB=${SPIRULA_CUDA_LIB:-$PWD/build/libspirula_cuda.so}
