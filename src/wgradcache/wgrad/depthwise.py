"""The direct depthwise wgrad kernel (groups = C = K): dW[c, y, x] = Σ_{n,ho,wo}
dY[n, ho, wo, c] · X[n, ho·s − p + y·d, wo·s − p + x·d, c], zero outside the image.

Why not a GEMM tile: per group the GEMM is M = 1 by N = Y·X, so an MMA tile of 16 rows
computes one useful row, and the grid has a CTA per channel. Here a CTA owns ``tile_n``
channels and a slice of the N·Ho·Wo reduction and reads each dY element once and each X
pixel once per tap (from cache; X is streamed once from memory), with plain FMAs, so the
kernel is the same IR on every target (no MMA, no async copy: both vendors have it).

The loop, the row reduction and the split are the direct kernels' (``wgrad/direct.py``);
what is depthwise's own: ``tile_n / vec`` lanes along the channels, whose dY vector and
X vector are the same ``vec`` channels (loads coalesced along NHWC's contiguous C), so
each thread keeps T·T f32 accumulators of ``vec`` channels (T = ``tile_m``), one X vector
load per tap at the thread's channel; dW [K, Y, X, 1] (cpg = 1) is one element per tap.
"""

from __future__ import annotations

from wgradcache.kernel.builder import KernelBuilder
from wgradcache.kernel.ir import DType, KernelDef, Value
from wgradcache.model.spec import KernelSpec, elem_bytes
from wgradcache.wgrad.direct import open_direct, reduce_and_write, stream

__all__ = ["build_depthwise"]


def build_depthwise(spec: KernelSpec, symbol: str) -> KernelDef:
    """The IR of a depthwise ``spec`` (validated by the caller)."""
    d = open_direct(spec, symbol, "C")
    vec, eb = spec.vec_b, elem_bytes(spec.dtype)

    def read_x(kb: KernelBuilder, a: dict[str, Value], at: Value, acc_t: DType
               ) -> list[Value]:
        """The tap's X vector: the thread's ``vec`` channels of the pixel."""
        xv = kb.bounded_load(a["x_ptr"], at, a["x_bytes"], vec, align=vec * eb)
        return [kb.convert(xv, acc_t)]

    accs = stream(d, spec, d.chan, 1, read_x)
    reduce_and_write(d, spec, accs, "C", 1, "depthwise_rows")
    return d.kb.finish()
