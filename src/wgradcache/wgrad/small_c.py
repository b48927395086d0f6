"""The direct small-C wgrad kernel (groups = 1, C <= 4: a network's stem): dW[k, y, x, c] =
Σ_{n,ho,wo} dY[n, ho, wo, k] · X[n, ho·s − p + y·d, wo·s − p + x·d, c], zero outside the
image; dW [K, Y, X, C] as the GEMM kernels write it (flat k·Y·X·C + (y·X + x)·C + c).

Why not a GEMM tile: as a GEMM the stem is M = K (32, 64) by N = C·Y·X (27) over N·Ho·Wo
(~800 000 for MobileNetV2's at batch 64): an N tile of 32 or more is mostly padding, a
B vector of C = 3 channels is one element (vec_b | cpg), and the GEMM kernels ran the
MobileNetV2 stem at ~9 TFLOP/s on an H100 (0.15 ms against a ~0.025 ms memory floor).
cuDNN and MIOpen ship a first-layer kernel of their own; this is ours.

The loop, the row reduction and the split are the direct kernels' (``wgrad/direct.py``);
what is small-C's own:

* Lanes: ``tile_n / vec_a`` lanes along the output channels k, each loading a dY vector
  of ``vec_a`` consecutive k (coalesced along NHWK's contiguous K), by ``tile_k`` rows
  along the positions. Every lane of a row shares its position, so its X loads are one
  address across the row (a broadcast: one transaction, from cache).
* Taps: per compiled tap, the pixel's Cc = ``vec_b`` channels as Cc scalar loads at the
  tap's offset + c·eb (a pixel of C = 3 is 6 bytes: no vector's alignment), each
  broadcast to the dY vector's ``vec_a`` lanes and FMA'd into its own accumulator:
  T·T·Cc accumulators of ``vec_a`` f32 per thread (held to the target's budget, as
  depthwise's T·T·vec). An invalid tap's offset is ``INVALID_OFFSET`` and stays past
  every buffer with c·eb added (< 2^32: no wrap), so it reads zero; a channel c >= the
  problem's C reads the next pixel's channel (or zero past X's end) into an accumulator
  that is never stored (the CTA's dW run has C channels per tap: ``reduce_and_write``
  decomposes its elements by the problem's cpg = C).
* Why this split of the work (and not lanes along positions): the X values of a position
  are shared by every k, the dY values by every tap and channel; lanes along k make the
  dY load coalesced and the X loads broadcasts, and the FMAs per load (T·T·Cc·vec_a per
  1 + T·T·Cc loads) grow with ``vec_a``. Lanes along positions would need every k's
  accumulators per thread (K x 27). Staging a step's X pixels in LDS would turn the
  scalar loads into a few vector LDS reads, at a barrier per step: a next step for the
  device to decide, not taken here.
"""

from __future__ import annotations

from wgradcache.kernel.builder import KernelBuilder
from wgradcache.kernel.ir import DType, KernelDef, Value, f32
from wgradcache.model.spec import KernelSpec, elem_bytes
from wgradcache.wgrad.direct import open_direct, reduce_and_write, stream

__all__ = ["build_small_c"]


def build_small_c(spec: KernelSpec, symbol: str) -> KernelDef:
    """The IR of a small-C ``spec`` (validated by the caller)."""
    d = open_direct(spec, symbol, "K")
    chans, vec, eb = spec.vec_b, spec.vec_a, elem_bytes(spec.dtype)

    def read_x(kb: KernelBuilder, a: dict[str, Value], at: Value, acc_t: DType
               ) -> list[Value]:
        """The tap's Cc channels, each a scalar broadcast to the dY vector's lanes."""
        out = []
        for c in range(chans):
            xv = kb.convert(kb.bounded_load(a["x_ptr"], kb.add(at, c * eb), a["x_bytes"],
                                            align=eb), f32)
            out.append(kb.splat(xv, vec) if vec > 1 else xv)
        return out

    accs = stream(d, spec, None, chans, read_x)
    reduce_and_write(d, spec, accs, "K", chans, "small_c_rows")
    return d.kb.finish()
