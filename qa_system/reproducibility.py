"""Seeding and the machine description that every training run records in its model's qa_system.json."""

from __future__ import annotations

import os
import platform
import random
from typing import Any

import numpy as np


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's, PyTorch's and transformers' random generators with ``seed``."""
    import torch
    from transformers import set_seed

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    set_seed(seed)


def machine(device: str = "cpu") -> dict[str, Any]:
    """The machine a model was trained on: platform, processor, CPU and PyTorch thread counts, PyTorch version, device (the GPU's name on CUDA)."""
    import torch

    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if device == "cuda" else device,
    }
