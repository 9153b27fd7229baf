#!/usr/bin/env bash
# The reference implementation of SAM 2 for the parity tests (tests/test_sam_parity.py; issue
# 41): Meta's `sam2` package on CPU torch, test-only (Spirula never imports either). Into
# .venv/ beside Spirula. torch's CPU build (about 190 MB; the default wheel of PyPI is the
# CUDA one, with ~4 GB of NVIDIA libraries that no test needs), the torchvision release made
# for it, then sam2 without its CUDA extension (SAM2_BUILD_CUDA=0) and without letting pip
# resolve torch again (its requirements would pull the CUDA build). Idempotent: nothing
# happens when both import. Where no CPU torch wheel can be had, one line and the parity
# tests skip.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
TORCH=2.13.0+cpu
TORCHVISION=0.28.0  # the release built against torch 2.13
SAM2=1.1.0
"$PY" -c "import torch, sam2" 2>/dev/null && exit 0
echo "spirula: installing SAM 2's reference (sam2 $SAM2 on torch $TORCH) for the parity tests"
if ! "$PY" -m pip install -q --disable-pip-version-check "torch==$TORCH" "torchvision==$TORCHVISION"; then
  echo "spirula: no CPU torch wheel ($TORCH) here: the SAM 2 parity tests will skip"
  exit 0
fi
"$PY" -m pip install -q --disable-pip-version-check "hydra-core>=1.3.2" "iopath>=0.1.10" "tqdm>=4.66"
SAM2_BUILD_CUDA=0 "$PY" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation "sam2==$SAM2"
"$PY" -c "import torch, sam2" >/dev/null
