"""``lower(kd, target)``: the LLVM IR text of a kernel for any target, by the backend the
catalog names for it (``model/backends.py``: ``lower_llvm`` for AMDGPU, ``lower_nvptx`` for
NVPTX, both on ``lower_common``'s walk)."""

from __future__ import annotations

from wgradcache.kernel.ir import KernelDef
from wgradcache.kernel.lower_common import LoweringError
from wgradcache.model.backends import backend_of

__all__ = ["lower", "LoweringError"]


def lower(kd: KernelDef, target: str) -> str:
    """LLVM IR text of ``kd`` for ``target`` ("gfx1250", "sm_90", ...); deterministic."""
    return backend_of(target).lower(kd, target)
