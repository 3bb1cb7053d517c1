"""Seeding and the machine description that every training run records in its model's qa_system.json."""

from __future__ import annotations

import os
import platform
import random
from typing import Any

import numpy as np


def seed_everything(seed: int) -> None:
    import torch
    from transformers import set_seed

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    set_seed(seed)


def machine() -> dict[str, Any]:
    import torch

    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "device": "cpu",
    }
