#!/usr/bin/env bash
# Run on the lent H200 (sm_90): fi_patches must disable cleanly on a real non-Blackwell CUDA
# device. FlashInfer is not installed there (its wheels exceed what a call may carry), so the
# checks use no FlashInfer and the fault-injection fake.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(), torch.cuda.get_device_capability())"
echo "--- doctor, no FlashInfer"; python3 -m fi_patches doctor; echo "rc=$?"
python3 -c "from pathlib import Path; from tests.fake_flashinfer import write_fake; write_fake(Path('/tmp/fake'))"
echo "--- doctor, healthy fake FlashInfer 0.7.4, real sm_90 device"
PYTHONPATH=/tmp/fake:$PWD python3 -m fi_patches doctor --json > $OUT/doctor_sm90.json; echo "rc=$?"
PYTHONPATH=/tmp/fake:$PWD python3 -m fi_patches doctor
echo "--- pinned_tactics and fi_patches.auto on sm_90"
PYTHONPATH=/tmp/fake:$PWD python3 - <<'PY'
import logging, os, torch
logging.basicConfig(level=logging.WARNING)
import fi_patches
from fi_patches.pinning.installation import installed_count
table = {"meta": {"device": "sm_103", "flashinfer": ">=0.7"}, "low_latency": [{"n": 512, "k": 1024, "max_rows": 8, "tactic": [128, 8, 1, 1]}]}
for _ in range(2):
    with fi_patches.pinned_tactics(table) as active:
        print("pinned_tactics yields", active, "installed", installed_count())
fi_patches.enable(); import flashinfer
print("auto on sm_90: installed", installed_count(), "outcome:", __import__("fi_patches.activation").activation.outcome())
fi_patches.disable()
PY
echo "--- FI_PATCHES_DEVICE=sm_103 on a real CUDA box: the self-check runs on CUDA tensors"
FI_PATCHES_DEVICE=sm_103 PYTHONPATH=/tmp/fake:$PWD python3 -m fi_patches doctor
echo "--- probe inputs at the schema's bounds on a CUDA device: one activation row allocated"
python3 -c "import torch; from fi_patches.pinning.serving import mxfp8_runner_inputs; from fi_patches.pins.schema import K_MAX, N_MAX, ROWS_MAX; b = torch.cuda.memory_allocated(); a = mxfp8_runner_inputs(N_MAX, K_MAX, ROWS_MAX)[0]; print('activation', a.device, tuple(a.shape), 'bytes allocated', torch.cuda.memory_allocated() - b)"
echo "--- CPU-capable tests on the GPU machine"
python3 -m pytest -q -p no:cacheprovider tests/test_pin_table.py tests/test_compat.py tests/test_fault_injection.py 2>&1 | tail -15
