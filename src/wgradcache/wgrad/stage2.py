"""Stage 2 of two-stage split-K: sum the R workspace slabs of each group, convert, store dW.

Its IR depends only on (dW dtype, R); R is compile-time so the fold is unrolled, and it must
equal stage 1's R (fewer drops part of the sum, more reads past the workspace). One thread
per dW element; dW [K, Y, X, cpg] is [groups, wg_M, wg_N] row-major, the slab layout.
"""

from __future__ import annotations

from wgradcache.kernel.builder import KernelBuilder
from wgradcache.kernel.ir import KernelDef
from wgradcache.model.spec import DW_DTYPES
from wgradcache.model.targets import get_target
from wgradcache.wgrad.abi import STAGE2_ARGS, STAGE2_BLOCK, declare
from wgradcache.wgrad.context import ir_dtype

__all__ = ["build_stage2", "stage2_symbol", "stage2_grid"]


def stage2_symbol(dw_dtype: str, replicas: int) -> str:
    return f"wgrad_stage2_{dw_dtype}_wsr{replicas}"


def stage2_grid(total_elems: int) -> tuple[int, int, int]:
    return (max(1, -(-total_elems // STAGE2_BLOCK)), 1, 1)


def build_stage2(target: str, dw_dtype: str, replicas: int) -> KernelDef:
    t = get_target(target)
    if not t.has_kernels:
        raise ValueError(f"{target}: no kernel generator for {t.family} targets yet")
    if dw_dtype not in DW_DTYPES:
        raise ValueError(f"dW dtype {dw_dtype!r} not one of {DW_DTYPES}")
    if replicas < 1:
        raise ValueError(f"ws_replicas {replicas} must be >= 1")
    kb = KernelBuilder(stage2_symbol(dw_dtype, replicas), STAGE2_BLOCK)
    a = declare(kb, STAGE2_ARGS, "fp16", dw_dtype)
    e = kb.add(kb.mul(kb.workgroup_id(0), STAGE2_BLOCK), kb.thread_id())
    ok = kb.icmp("slt", e, a["total_elems"])
    slab = a["slab_elems"]
    g, r = kb.udiv(e, slab), kb.urem(e, slab)
    base = kb.add(kb.mul(kb.mul(g, replicas), slab), r)
    acc = kb.load(kb.gep(a["ws_ptr"], base), pred=ok)
    for j in range(1, replicas):
        off = kb.add(base, kb.mul(slab, j))
        acc = kb.fadd(acc, kb.load(kb.gep(a["ws_ptr"], off), pred=ok))
    kb.store(kb.gep(a["dw_ptr"], e), kb.convert(acc, ir_dtype(dw_dtype)), pred=ok)
    return kb.finish()
