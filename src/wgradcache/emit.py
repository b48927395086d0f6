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

from .spec import KernelSpec

__all__ = ["EmittedKernel", "emit_ir", "generator_digest"]

_PKG = Path(__file__).resolve().parent
_GENERATOR_SOURCES = ("kernel", "wgrad", "runtime", "spec.py", "targets.py", "emit.py")


@dataclass(frozen=True)
class EmittedKernel:
    symbol: str
    ir_text: str


def emit_ir(spec: KernelSpec, check: bool = True) -> EmittedKernel:
    from .kernel.lower_llvm import lower
    from .wgrad.kernel import build_kernel

    kdef = build_kernel(spec, check=check)
    return EmittedKernel(symbol=kdef.name, ir_text=lower(kdef, spec.target))


@lru_cache(maxsize=1)
def generator_digest() -> str:
    h = hashlib.sha256()
    for name in _GENERATOR_SOURCES:
        p = _PKG / name
        files = sorted(p.rglob("*.py")) if p.is_dir() else [p]
        for f in files:
            h.update(str(f.relative_to(_PKG)).encode() + b"\0")
            h.update(f.read_bytes() + b"\0")
    return h.hexdigest()
