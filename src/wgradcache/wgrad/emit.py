"""Spec -> LLVM IR text, and the digest of the sources that decide that text.

The cache calls this and never imports the generators directly; the generators never import
the cache. The generator digest (Triton's ``triton_key()``) is over our own sources that can
change emitted IR: when it is unchanged, an entry is up to date without emitting anything.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from wgradcache.model.spec import KernelSpec

__all__ = ["EmittedKernel", "emit_ir", "generator_digest", "GENERATOR_SOURCES"]

_PKG = Path(__file__).resolve().parents[1]
# Exactly the modules that emitting IR imports (tested; the backends' modules, which the
# package registers and which pick the lowering, among them): the emulator, the launcher, the
# split policy, the walk, the error model (numerics/) and the device sizes (model/devices.py)
# can change without making every entry re-emit. The job data (geometries.yaml, read through
# jobs/) decides which specs are valid, never their IR.
GENERATOR_SOURCES = (
    "wgrad/emit.py", "model/spec.py", "model/targets.py", "model/backends.py",
    "model/problem.py", "wgrad/abi.py", "backend/amdgpu.py", "backend/nvptx.py",
    "kernel/ir.py", "kernel/builder.py", "kernel/verify.py", "kernel/mma.py",
    "kernel/lower.py", "kernel/lower_common.py", "kernel/lower_llvm.py", "kernel/lower_nvptx.py",
    "wgrad/kernel.py", "wgrad/context.py", "wgrad/slots.py", "wgrad/gather.py", "wgrad/operand.py",
    "wgrad/operand_a.py", "wgrad/operand_b.py", "wgrad/copies.py", "wgrad/kloop.py",
    "wgrad/epilogue.py", "wgrad/stage2.py", "wgrad/direct.py", "wgrad/depthwise.py",
    "wgrad/small_c.py",
)


@dataclass(frozen=True)
class EmittedKernel:
    symbol: str
    ir_text: str


def emit_ir(spec: KernelSpec, check: bool = True) -> EmittedKernel:
    from wgradcache.kernel.lower import lower
    from wgradcache.wgrad.kernel import build_kernel

    kdef = build_kernel(spec, check=check)
    return EmittedKernel(symbol=kdef.name, ir_text=lower(kdef, spec.target))


@lru_cache(maxsize=1)
def generator_digest() -> str:
    h = hashlib.sha256()
    for name in GENERATOR_SOURCES:
        h.update(name.encode() + b"\0")
        h.update((_PKG / name).read_bytes() + b"\0")
    return h.hexdigest()
