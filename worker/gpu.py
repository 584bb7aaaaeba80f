"""GPU pinning: one worker per GPU. Must run before torch is imported anywhere in the process."""

from __future__ import annotations

import os
import sys


def pin_gpu(index: int | None, cpu_only: bool = False) -> None:
    if "torch" in sys.modules:
        raise RuntimeError("pin_gpu() must run before torch is imported")
    if cpu_only:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    elif index is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(index)
        # Ordinals in nvidia-smi order, so --gpu 1 is the card nvidia-smi calls 1.
        os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
