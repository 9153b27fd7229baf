"""Training the blocks on Ray: one task per block, one GPU each.

Ray schedules, places, retries: a task whose worker process dies (a crashed
driver, an out-of-memory kill, a lost node) or raises is run again, up to
``max_retries`` times, and its block is trained from the start in the same
folder. Results come back as files on the storage the driver and workers
share (the run folder): each task writes its block's run folder
(``splat.ply``, ``metrics.json``, ``device.json``) and returns their paths.

Ray hands a task its GPU through ``CUDA_VISIBLE_DEVICES``, which Vulkan does
not read: the task asks the CUDA driver for the UUID of the GPU it was given
(``cuDeviceGetUuid`` of CUDA device 0, which honours the variable, through
ctypes; ``nvidia-smi`` as the fallback) and opens the Vulkan device with the
same ``VkPhysicalDeviceIDProperties::deviceUUID``. On a cluster without GPUs
(lavapipe) tasks take no GPU and use the default Vulkan device.

What Ray and the tasks print stays out of the driver's terminal: each task
writes its output to its block's run folder (``train.log``), Ray's own lines
on the driver go to ``ray.log`` in the partition folder, neither with ANSI
codes; with ``verbose`` (``--verbose``) both show on stderr as well, Ray's
coloured prefixes only on a terminal. The driver shows a progress bar of
the blocks done.

Ray is an optional dependency (``pip install 'spirula[ray]'``), imported
only here, only when blocks are trained.
"""

from __future__ import annotations

import contextlib
import ctypes as C
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from spirula import settings
from spirula.errors import SpirulaError
from spirula.partition.blocks import PartitionError
from spirula.progress import Bar, capture_output, is_terminal

RAY_HINT = "training with --partition needs Ray: pip install 'spirula[ray]' (or pip install ray)"
MAX_RETRIES = 3  # per block: a worker lost or a task failed this many times ends the run
# a test hook: the name of a block whose first attempt kills its worker (os._exit) once
# (tests/test_partition.py sets it; train_blocks hands it to the tasks)
FAIL_ONCE: str | None = None
LOCAL_OBJECT_STORE = 256 << 20  # bytes: results travel as files, not objects
BLOCK_LOG = "train.log"  # a task's output, in its block's run folder
RAY_LOG = "ray.log"  # Ray's own lines on the driver, in the partition folder


def import_ray():
    try:
        import ray
    except ImportError:
        raise PartitionError(RAY_HINT) from None
    return ray


def init_ray(address: str, log=print, verbose: bool = False, log_file: Path | None = None):
    """Connect to Ray: ``local`` starts a head on this machine for it alone
    (no dashboard, no usage statistics: works offline; Ray itself picks the
    node's address: on Linux it turns 127.0.0.1 into the machine's own, and
    Ray 2.60 protects the head with a token), ``auto`` joins the
    cluster this machine is part of, ``HOST:PORT`` (or ``ray://HOST:PORT``) a
    given one. What Ray prints meanwhile goes to ``log_file`` (on stderr too
    when ``verbose``); the tasks' output reaches the driver only when
    ``verbose``. Returns the ray module."""
    ray = import_ray()
    settings.quiet_ray(colour=is_terminal(sys.stderr))  # no colour codes from Ray in a file or pipe
    if ray.is_initialized():
        return ray
    with capture_output(log_file, echo=verbose) if log_file is not None else contextlib.nullcontext():
        if address == "local":
            ray.init(
                address="local",
                include_dashboard=False,
                object_store_memory=LOCAL_OBJECT_STORE,
                configure_logging=False,
                log_to_driver=verbose,
            )
        else:
            try:
                ray.init(address=address, configure_logging=False, log_to_driver=verbose)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise PartitionError("--ray-address %s: cannot connect to Ray (%s)" % (address, exc)) from None
    res = ray.cluster_resources()
    log(
        "spirula: Ray %s at %s: %d CPUs, %d GPUs"
        % (ray.__version__, address, int(res.get("CPU", 0)), int(res.get("GPU", 0)))
    )
    return ray


# ---- in the worker: which Vulkan device is the GPU Ray gave us --------------------------


def _format_uuid(raw: bytes) -> str:
    return raw.hex()


def cuda_visible_uuid() -> str | None:
    """The UUID (32 hex digits) of CUDA device 0 as this process sees it
    (after CUDA_VISIBLE_DEVICES), from the CUDA driver; None without one."""
    try:
        cuda = C.CDLL("libcuda.so.1")
    except OSError:
        return None
    dev = C.c_int(0)
    uuid = (C.c_ubyte * 16)()
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGet(C.byref(dev), 0) != 0:
        return None
    get = getattr(cuda, "cuDeviceGetUuid_v2", None) or cuda.cuDeviceGetUuid
    if get(uuid, dev) != 0:
        return None
    return _format_uuid(bytes(uuid))


def nvidia_smi_uuid(gpu_id) -> str | None:
    """The UUID of GPU ``gpu_id`` (nvidia-smi's index, or a ``GPU-...`` UUID) by nvidia-smi."""
    s = str(gpu_id)
    if s.startswith("GPU-"):
        return s[4:].replace("-", "").lower()
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        idx, _, uuid = (x.strip() for x in line.partition(","))
        if idx == s and uuid.startswith("GPU-"):
            return uuid[4:].replace("-", "").lower()
    return None


def vulkan_index_for_uuid(uuid: str) -> int | None:
    from spirula.backends.vulkan.vkinfo import list_devices

    for d in list_devices():
        if d.device_uuid and d.device_uuid == uuid:
            return d.index
    return None


def pick_vulkan_device(gpu_ids) -> tuple:
    """(Vulkan index or None for the default, UUID or "") of the GPU Ray gave
    this worker (``ray.get_gpu_ids()``); no GPU: (None, "")."""
    if not gpu_ids:
        return None, ""
    uuid = cuda_visible_uuid() or nvidia_smi_uuid(gpu_ids[0])
    if uuid is None:
        raise PartitionError(
            "Ray gave this task GPU %s but its UUID is unknown (no libcuda, no nvidia-smi)" % gpu_ids[0]
        )
    index = vulkan_index_for_uuid(uuid)
    if index is None:
        raise PartitionError(
            "Ray gave this task GPU %s (UUID %s) but no Vulkan device has that UUID" % (gpu_ids[0], uuid)
        )
    return index, uuid


def train_block(dataset: str, run_dir: str, cfg_json: str, fail_once: str | None = None, verbose: bool = False) -> dict:
    """The body of one block's task: train ``dataset`` into ``run_dir`` with the
    normal trainer on the worker's device, its output into ``run_dir/train.log``
    (and to Ray's driver as well when ``verbose``). Returns the paths it wrote
    and the block's metrics."""
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    with capture_output(run / BLOCK_LOG, echo=verbose):
        print("spirula: %s: task in process %d" % (run.name, os.getpid()), flush=True)
        return _train_block(dataset, run, cfg_json, fail_once)


def _train_block(dataset: str, run: Path, cfg_json: str, fail_once: str | None) -> dict:
    from spirula.backends import open_device, set_device
    from spirula.data import load_dataset
    from spirula.train.config import TrainConfig
    from spirula.train.run import train_run

    if fail_once is not None and fail_once == run.name:
        marker = run / ".killed-once"
        if not marker.exists():
            marker.write_text("the first attempt of this block killed its worker (ray_run.FAIL_ONCE)\n")
            os._exit(1)
    try:
        import ray

        gpu_ids = ray.get_gpu_ids() if ray.is_initialized() else []
    except ImportError:
        gpu_ids = []
    index, uuid = pick_vulkan_device(gpu_ids)
    device = open_device("vulkan", index)
    set_device(device)
    info = device.info
    uuid = uuid or getattr(info, "device_uuid", "")
    print("spirula: %s on Vulkan device %d, %s (UUID %s)" % (run.name, info.index, info.name, uuid or "-"), flush=True)
    cfg = TrainConfig.from_dict(json.loads(cfg_json))
    scene = load_dataset(dataset, eval_split="none", background=cfg.background or "auto", seed=cfg.seed)
    t0 = time.perf_counter()
    metrics = train_run(scene, cfg, device, run, log=lambda m: print("[%s] %s" % (run.name, m), flush=True))
    device_json = dict(
        block=run.name,
        vulkan_index=info.index,
        device=info.name,
        device_uuid=uuid,
        ray_gpu_ids=[str(g) for g in gpu_ids],
        pid=os.getpid(),
        wall_s=time.perf_counter() - t0,
    )
    (run / "device.json").write_text(json.dumps(device_json, indent=1))
    return dict(
        block=run.name,
        splat=str(run / "splat.ply"),
        metrics=str(run / "metrics.json"),
        device=device_json,
        n_splats=metrics["n_splats"],
        peak_vram_mib=metrics["peak_vram_mib"],
        training_time_s=metrics["training_time_s"],
    )


def train_blocks(
    ray, manifest: dict, partition_dir: Path, runs_dir: Path, cfg, log=print, verbose: bool = False
) -> list:
    """Train every block of the manifest as a Ray task; the tasks' results in
    manifest order. One GPU per task where the cluster has GPUs, else none.
    A progress bar counts the blocks done; what Ray prints meanwhile goes to
    ``partition_dir/ray.log`` (on stderr too when ``verbose``)."""
    import dataclasses

    gpus = ray.cluster_resources().get("GPU", 0)
    # max_calls=1: a fresh worker per block, so its device memory goes back when the block ends
    task = ray.remote(max_calls=1)(train_block).options(
        num_gpus=1 if gpus > 0 else 0, num_cpus=1, max_retries=MAX_RETRIES, retry_exceptions=True
    )
    block_cfg = dataclasses.replace(cfg, eval_split="none", eval_every=0, downscale=None)
    refs = [
        task.remote(
            str(Path(partition_dir).resolve() / e["path"]),
            str(Path(runs_dir).resolve() / e["name"]),
            block_cfg.to_json(),
            FAIL_ONCE,
            verbose,
        )
        for e in manifest["blocks"]
    ]
    log(
        "spirula: %d block tasks submitted (%s each); their output: %s/block-NN/%s"
        % (len(refs), "1 GPU" if gpus > 0 else "no GPU: lavapipe", runs_dir, BLOCK_LOG)
    )
    try:
        with capture_output(Path(partition_dir) / RAY_LOG, echo=verbose) as cap:
            with Bar(len(refs), "training blocks", unit="block", stream=cap.stream) as bar:
                pending = refs
                while pending:
                    done, pending = ray.wait(pending, num_returns=1)
                    bar.update(len(done))
            results = ray.get(refs)
    except Exception as exc:  # ray.exceptions.RayError: a block failed past its retries
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SpirulaError(
            "a block failed %d times: %s (its log: %s/block-NN/%s)" % (MAX_RETRIES + 1, first, runs_dir, BLOCK_LOG)
        ) from None
    for r in results:
        d = r["device"]
        log(
            "spirula: %s: %s splats in %.1f s on %s (UUID %s)"
            % (r["block"], f"{r['n_splats']:,}", r["training_time_s"], d["device"], d["device_uuid"] or "-")
        )
    return results
