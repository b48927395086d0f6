"""build_kernel(spec) -> KernelDef: one wgrad kernel, every variant of DESIGN §4.

The kernel is generic over the problem: every extent, the split degree and the slice width
are arguments (``runtime/abi.py``), so one binary serves every problem ``serves`` admits.
"""

from __future__ import annotations

from wgradcache.kernel.ir import KernelDef
from wgradcache.model.spec import KernelSpec, is_depthwise, is_small_c, validate
from wgradcache.wgrad.context import open_wgrad_kernel
from wgradcache.wgrad.depthwise import build_depthwise
from wgradcache.wgrad.epilogue import cshuffle_epilogue, default_epilogue
from wgradcache.wgrad.kloop import async_k_loop, sync_k_loop
from wgradcache.wgrad.small_c import build_small_c

__all__ = ["build_kernel", "kernel_symbol", "RING_MIN_BLOCKS"]

# A deeper async ring says one block per SM suffices (``KernelDef.min_blocks``): without
# it ptxas squeezed sm_90 t128x128x64-w4x2-c16x16 -s3/-s4 into 128 registers with an 8-16
# byte stack frame (two blocks of 256 at most) where its two-stage twin takes 154 and
# none; with it, 154 and none, and each ring kernel allocates as its twin does.
RING_MIN_BLOCKS = 1


def kernel_symbol(spec: KernelSpec) -> str:
    """The code object's symbol: the label as an identifier (the label is lossless)."""
    return "wgrad_" + spec.label().replace("-", "_")


def build_kernel(spec: KernelSpec, check: bool = True) -> KernelDef:
    """The IR of ``spec``'s kernel; ValueError when the spec is invalid (with the reason).

    ``check=False`` builds what the validator refuses (to reproduce what LLVM does with it,
    e.g. LDS past the target's limit). The ladder budgets are the job data's, not the
    generator's: a kernel over them spills but is correct, so they are not checked here."""
    ok, why = validate(spec, limits=None) if check else (True, "")
    if not ok:
        raise ValueError(f"cannot build {spec.label()}: {why}")
    if is_depthwise(spec):
        return build_depthwise(spec, kernel_symbol(spec))
    if is_small_c(spec):
        return build_small_c(spec, kernel_symbol(spec))
    ctx = open_wgrad_kernel(spec, kernel_symbol(spec))
    accs = async_k_loop(ctx) if spec.k_loop == "async" else sync_k_loop(ctx)
    if spec.epilogue == "cshuffle":
        cshuffle_epilogue(ctx, accs)
    else:
        default_epilogue(ctx, accs)
    return ctx.kb.finish(min_blocks=RING_MIN_BLOCKS if spec.stages > 2 else 0)
