"""``lower(kd, target)``: the LLVM IR text of a kernel for any target, by its vendor.

AMD targets go to ``lower_llvm`` (AMDGPU), NVIDIA ones to ``lower_nvptx`` (which builds on
it); this module is the one place that chooses, so neither lowering imports the other's
dispatch.
"""

from __future__ import annotations

from wgradcache.kernel.ir import KernelDef
from wgradcache.kernel.lower_llvm import LoweringError
from wgradcache.kernel.lower_llvm import lower as lower_amdgpu
from wgradcache.kernel.lower_nvptx import lower_nvptx
from wgradcache.model.targets import get_target

__all__ = ["lower", "LoweringError"]


def lower(kd: KernelDef, target: str) -> str:
    """LLVM IR text of ``kd`` for ``target`` ("gfx1250", "sm_90", ...); deterministic."""
    if get_target(target).is_nvidia:
        return lower_nvptx(kd, target)
    return lower_amdgpu(kd, target)
