"""Which device runs the models: one setting (``QA_DEVICE``, ``--device``) for the reader, the encoders and the generator.

The setting reads as Haystack's ``ComponentDevice`` strings: ``auto`` (a CUDA GPU when there is one,
else the CPU), ``cpu``, ``cuda`` (the first GPU) or ``cuda:N``. ``check_device`` checks its spelling
without importing torch (settings are made by every door); ``resolve_device`` turns it into the
device that runs, and a GPU asked for and absent is a ``QAError`` naming it and the fix, never a
fall-back to the CPU that nobody asked for. Components are handed the setting at run time (never
through their serialised parameters: an exported pipeline runs on whatever its machine has).

The CPU helpers (physical cores, int8 dot-product units) live here too: the ONNX backends of the
reader and of the encoder both size their sessions and choose their int8 weights with them.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from qa_system.errors import QAError

DEVICES = ("auto", "cpu", "cuda", "cuda:N")
# CPU flags of int8 dot-product units (x86 VNNI and AMX, Arm dot product and int8 matrix multiply).
# Without one, int8 matrix products are under 2x fp32 and full-range int8 weights saturate.
INT8_DOT_PRODUCT_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8", "asimddp", "i8mm")
_FIX = "set QA_DEVICE=cpu (or --device cpu), or QA_DEVICE=auto to use a GPU only when there is one."


def check_device(setting: object) -> str:
    """The device setting in its one spelling (lower case, no spaces); a QAError for anything else."""
    text = str(setting).strip().lower() if isinstance(setting, str) else ""
    if text == "gpu":
        text = "cuda"
    if text in ("auto", "cpu", "cuda") or re.fullmatch(r"cuda:\d+", text):
        return text
    raise QAError(f"Unknown device {setting!r}.", f"use one of: {', '.join(DEVICES)} (QA_DEVICE or --device).")


# The doors that set a device: the environment, or the command line's flag (which sets it for the command).
_ASKED_BY = "QA_DEVICE or --device"


def cuda_count() -> int:
    """How many CUDA GPUs PyTorch sees (0 without a CUDA build or a driver)."""
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - a broken driver is no GPU, said by resolve_device when one was asked for
        return 0


def resolve_device(setting: str = "auto") -> str:
    """The device that runs for ``setting``: "cpu" or "cuda:N". A GPU asked for (``cuda``, ``cuda:N``) that
    this machine does not have is a QAError of one line naming it (as written: "gpu" too) and the fix."""
    asked, setting = setting, check_device(setting)
    if setting == "cpu":
        return "cpu"
    count = cuda_count()
    if setting == "auto":
        return "cuda:0" if count else "cpu"
    index = int(setting.partition(":")[2] or 0)
    if count == 0:
        raise QAError(
            f"The device {str(asked).strip()} ({_ASKED_BY}) asks for a CUDA GPU, and this machine has none that PyTorch can use.", _FIX
        )
    if index >= count:
        raise QAError(
            f"The device {str(asked).strip()} ({_ASKED_BY}) asks for GPU {index}, and this machine has {count} (cuda:0 to cuda:{count - 1}).",
            _FIX,
        )
    return f"cuda:{index}"


def component_device(setting: str = "auto"):
    """The resolved device as Haystack's ``ComponentDevice`` (for Haystack's own model components)."""
    from haystack.utils import ComponentDevice

    return ComponentDevice.from_str(resolve_device(setting))


def is_cuda(device: str) -> bool:
    """Whether a resolved device is a GPU."""
    return device.startswith("cuda")


def half_dtype():
    """The 16-bit dtype a GPU computes in: bfloat16 where it has it (Ampere and newer), else float16."""
    import torch

    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def onnx_providers(device: str) -> list:
    """ONNX Runtime's execution providers for a resolved device: CUDA's (that GPU) when this ONNX Runtime has it,
    else the CPU's alone; CPU always last, for the operators CUDA's lacks."""
    import onnxruntime as ort

    if is_cuda(device) and "CUDAExecutionProvider" in ort.get_available_providers():
        return [("CUDAExecutionProvider", {"device_id": int(device.partition(":")[2] or 0)}), "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


_core_share = 1  # processes that share the machine's cores (a server of several processes)


def share_cores(processes: int) -> None:
    """This process is one of ``processes`` that share the machine's cores: ``physical_cores`` is its part of them."""
    global _core_share
    _core_share = max(1, processes)


def physical_cores() -> int:
    """Physical cores (hyper-threads share one core's matrix units, so they do not help GEMMs), or this process's part
    of them (``share_cores``): what its thread pools are sized to."""
    import psutil

    return max(1, (psutil.cpu_count(logical=False) or os.cpu_count() or 1) // _core_share)


def read_cpuinfo() -> str:
    """The text of /proc/cpuinfo; empty where there is none (not Linux)."""
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return ""


def cpuinfo_field(cpuinfo: str, name: str) -> str:
    """The first ``name : value`` of /proc/cpuinfo text ("" when absent)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == name:
            return value.strip()
    return ""


def int8_dot_product(cpuinfo: str | None = None) -> list[str]:
    """The CPU's int8 dot-product flags ([] for none), from /proc/cpuinfo text (x86 "flags", Arm "Features")."""
    cpuinfo = read_cpuinfo() if cpuinfo is None else cpuinfo
    flags = set((cpuinfo_field(cpuinfo, "flags") or cpuinfo_field(cpuinfo, "Features")).split())
    return [flag for flag in INT8_DOT_PRODUCT_FLAGS if flag in flags]


def import_with_jax_on_cpu(name: str):
    """Module ``name`` imported with JAX (when installed) kept on the CPU, for a module that uses JAX as it is imported
    (bm25s): JAX's first use of a GPU takes 75% of its memory, which the reader and the encoders need (a server of
    several processes would not start). A JAX_PLATFORMS of the user's own, or a JAX imported before, is left as it is."""
    import importlib

    if name in sys.modules or "jax" in sys.modules or "JAX_PLATFORMS" in os.environ:
        return importlib.import_module(name)
    os.environ["JAX_PLATFORMS"] = "cpu"
    try:
        return importlib.import_module(name)
    finally:
        os.environ.pop("JAX_PLATFORMS", None)
