"""The direct depthwise wgrad kernel (groups = C = K): dW[c, y, x] = Σ_{n,ho,wo}
dY[n, ho, wo, c] · X[n, ho·s − p + y·d, wo·s − p + x·d, c], zero outside the image.

Why not a GEMM tile: per group the GEMM is M = 1 by N = Y·X, so an MMA tile of 16 rows
computes one useful row, and the grid has a CTA per channel. Here a CTA owns ``tile_n``
channels and a slice of the N·Ho·Wo reduction and reads each dY element once and each X
pixel once per tap (from cache; X is streamed once from memory), with plain FMAs, so the
kernel is the same IR on every target (no MMA, no async copy: both vendors have it).

* Threads: ``tile_n / vec`` lanes along the channels (loads of ``vec`` channels, coalesced
  along NHWC's contiguous C) by ``tile_k`` rows along the reduction; row r of a CTA takes
  positions k_begin + r, k_begin + r + tile_k, ... of its slice, in a loop over the CTA's
  steps (uniform: no exec-mask loop), a row past the slice's end invalid. Each thread keeps T·T
  f32 accumulators of ``vec`` channels (T = ``tile_m``, the compiled filter side); a tap
  outside the problem's Y x X is accumulated and never stored. Every load is bounded
  (``bounded_load``): an invalid one reads at ``INVALID_OFFSET`` and returns zero, no
  branch.
* CTA reduction: every thread row writes its partials to LDS ([T·T, tile_k, tile_n] f32),
  one barrier, then each thread sums the rows of dW elements of the block; the flat index
  e = c·Y·X + y·X + x of dW [K, Y, X, 1] is decomposed per element (a division by the
  problem's Y·X, once per element per CTA).
* Across CTAs: the split-K contract of the GEMM kernels (``abi.WGRAD_ARGS``, one binary
  for every degree): grid = (channel blocks, 1, degree), slice z reduces [z·ks, min(z·ks +
  ks, wg_K)), an empty slice adds zeros; ``reduction`` none stores, atomic adds (f32, or a
  packed 16-bit pair (e, e + 1) with e even: ``serves`` keeps C·Y·X even and the channel
  block is even, so a pair never leaves a CTA's range nor dW).
"""

from __future__ import annotations

from wgradcache.kernel.builder import KernelBuilder
from wgradcache.kernel.ir import KernelDef, Value, f32, i32
from wgradcache.model.spec import KernelSpec, elem_bytes, lds_bytes
from wgradcache.wgrad.abi import WGRAD_ARGS, declare
from wgradcache.wgrad.context import divmod_magic, ir_dtype, udiv_const, urem_const
from wgradcache.wgrad.gather import pixel
from wgradcache.wgrad.operand import INVALID_OFFSET

__all__ = ["build_depthwise"]


def _stream(kb: KernelBuilder, a: dict[str, Value], spec: KernelSpec, chan: Value,  # noqa: PLR0913 - emits the loop: the IR values it reads
            chan_ok: Value, row: Value, k_begin: Value, k_end: Value) -> list[Value]:
    """The thread's accumulators over its positions of the slice (one per compiled tap):
    step i of the CTA gives row r position k_begin + i·tile_k + r. Tap (y, x) reads pixel
    (ho·s − p + y·d, wo·s − p + x·d): its row and column are stepped by d, its byte offset
    by d·W·C·eb per row and d·C·eb per column (adds on the position's own offset, a few
    uniform values: the MFMA targets spilled SGPRs holding one per tap). A tap past the
    problem's Y x X is computed all the same and never stored (its dW element does not
    exist: ``_reduce_and_write`` stores Y·X taps per channel)."""
    taps, vec, eb = spec.tile_m, spec.vec_b, elem_bytes(spec.dtype)
    acc_t = f32.vec(vec) if vec > 1 else f32
    past = kb.const(INVALID_OFFSET, i32)
    col_step = kb.mul(kb.mul(a["dilation"], a["C"]), eb)
    row_step = kb.mul(col_step, a["W"])
    zero = kb.const(0.0, acc_t)
    # the steps are the CTA's (a uniform loop: a scalar branch, no exec-mask loop); the
    # last one's rows past the slice are invalid positions
    with kb.for_(k_begin, k_end, spec.tile_k, carried=[zero] * (taps * taps)) as lp:
        k = kb.add(lp.index, row)
        valid = kb.and_(chan_ok, kb.icmp("slt", k, k_end))
        img, _, _, hs, ws = pixel(kb, a, k)
        # dY is NHWK over (Ho, Wo): position k's channel c is element k·K + c
        dy_off = kb.select(valid, kb.mul(kb.add(kb.mul(k, a["K"]), chan), eb), past)
        dy = kb.convert(kb.bounded_load(a["dy_ptr"], dy_off, a["dy_bytes"], vec,
                                        align=vec * eb), acc_t)
        h0, w0 = kb.sub(hs, a["pad"]), kb.sub(ws, a["pad"])
        px = kb.add(kb.mul(kb.add(kb.mul(kb.add(kb.mul(img, a["H"]), h0), a["W"]), w0),
                           a["C"]), chan)
        hy, wx = [h0], [w0]
        for _ in range(1, taps):
            hy.append(kb.add(hy[-1], a["dilation"]))
            wx.append(kb.add(wx[-1], a["dilation"]))
        # a tap's bound as an integer mask (INVALID_OFFSET or 0) of its row and column, not
        # a predicate: ptxas spilled a 5x5 kernel's T + T predicates live across the taps
        bad_rows = [kb.select(kb.and_(valid, kb.icmp("ult", h, a["H"])), 0, past) for h in hy]
        bad_cols = [kb.select(kb.icmp("ult", w, a["W"]), 0, past) for w in wx]
        nxt = []
        row_off = kb.mul(px, eb)
        for y in range(taps):
            off = row_off
            for x in range(taps):
                # valid: the offset (< 2^31); else INVALID_OFFSET exactly (umin of a value
                # with bit 31 set), never an offset near 2^32 that an access could wrap past
                at = kb.umin(kb.or_(off, kb.or_(bad_rows[y], bad_cols[x])), past)
                xv = kb.bounded_load(a["x_ptr"], at, a["x_bytes"], vec, align=vec * eb)
                nxt.append(kb.fma(dy, kb.convert(xv, acc_t), lp.carried[y * taps + x]))
                off = kb.add(off, col_step)
            row_off = kb.add(row_off, row_step)
        lp.yield_(*nxt)
    return list(lp.results)


def _reduce_and_write(kb: KernelBuilder, a: dict[str, Value], spec: KernelSpec,  # noqa: PLR0913 - emits the reduction: the IR values it reads
                      accs: list[Value], tid: Value, lane_c: Value, row: Value,
                      c0: Value) -> None:
    """Rows' partials through LDS, summed per dW element of the CTA's channels, then
    stored or added into dW (module docstring)."""
    taps, vec, rows, tile_n = spec.tile_m, spec.vec_b, spec.tile_k, spec.tile_n
    part = kb.lds("depthwise_rows", lds_bytes(spec), f32)
    for t, acc in enumerate(accs):
        at = kb.add(kb.mul(kb.add(row, t * rows), tile_n), kb.mul(lane_c, vec))
        kb.store(kb.gep(part, at), acc, align=min(16, 4 * vec))
    kb.barrier()
    dwt = ir_dtype(spec.dw_dtype)
    packed = spec.reduction == "atomic" and spec.dw_dtype != "fp32"
    per = 2 if packed else 1
    block = spec.block_size
    yx = a["wg_N"]  # Y·X·cpg with cpg = 1
    here = kb.mul(kb.smin(kb.sub(a["C"], c0), tile_n), yx)  # dW elements of the CTA
    first = kb.mul(c0, yx)
    items = -(-tile_n * taps * taps // per)
    for it in range(-(-items // block)):
        e0 = kb.mul(kb.add(tid, it * block), per)
        sums, oks = [], []
        for u in range(per):
            e = kb.add(e0, u)
            ok = kb.icmp("slt", e, here)
            e = kb.select(ok, e, 0)  # an element past the CTA's reads row 0 of LDS
            cl = kb.udiv(e, yx)
            yy, xx = divmod_magic(kb, kb.sub(e, kb.mul(cl, yx)), a, "Xcpg")
            base = kb.add(kb.mul(kb.add(kb.mul(yy, taps), xx), rows * tile_n), cl)
            s = kb.load(kb.gep(part, base))
            for r in range(1, rows):
                s = kb.fadd(s, kb.load(kb.gep(part, kb.add(base, r * tile_n))))
            sums.append(s)
            oks.append(ok)
        out = kb.gep(a["dw_ptr"], kb.add(first, e0))
        if spec.reduction == "none":
            kb.store(out, kb.convert(sums[0], dwt), pred=oks[0])
        elif packed:  # e0 even and the CTA's count even: both halves valid together
            kb.atomic_add(out, kb.vec(*(kb.convert(s, dwt) for s in sums)), pred=oks[0])
        else:
            kb.atomic_add(out, sums[0], pred=oks[0])


def build_depthwise(spec: KernelSpec, symbol: str) -> KernelDef:
    """The IR of a depthwise ``spec`` (validated by the caller)."""
    kb = KernelBuilder(symbol, spec.block_size)
    a = declare(kb, WGRAD_ARGS, spec.dtype, spec.dw_dtype)
    lanes = spec.tile_n // spec.vec_b
    tid = kb.thread_id()
    lane_c, row = urem_const(kb, tid, lanes), udiv_const(kb, tid, lanes)
    c0 = kb.mul(kb.workgroup_id(0), spec.tile_n)
    chan = kb.add(c0, kb.mul(lane_c, spec.vec_b))
    chan_ok = kb.icmp("slt", chan, a["C"])  # vec_b | C (serves): the whole vector inside
    k_begin = kb.mul(kb.workgroup_id(2), a["ks"])
    k_end = kb.smin(kb.add(k_begin, a["ks"]), a["wg_K"])
    accs = _stream(kb, a, spec, chan, chan_ok, row, k_begin, k_end)
    _reduce_and_write(kb, a, spec, accs, tid, lane_c, row, c0)
    return kb.finish()

