"""What the direct wgrad kernels share (``depthwise.py``, ``small_c.py``): a CTA of
``tile_n / vec`` lanes along output channels by ``tile_k`` rows along the reduction, the
thread's f32 accumulators over its positions of a slice of N·Ho·Wo, the LDS row reduction
and the store or atomic add into dW; no MMA tile, so the same IR on every target.

* The position loop (``stream``): row r of a CTA takes positions k_begin + r, k_begin + r
  + tile_k, ... of its slice, in a loop over the CTA's steps (uniform: no exec-mask loop),
  a row past the slice's end invalid. Per position a thread loads its dY vector (``vec_a``
  output channels: coalesced along NHWK's contiguous K) and, per compiled tap of the T x T
  (T = ``tile_m``), what the kernel reads of the tap's pixel (``XReader``); a tap outside
  the problem's Y x X is accumulated and never stored. Every load is bounded
  (``bounded_load``): an invalid one reads at ``INVALID_OFFSET`` and returns zero, no branch.
* CTA reduction (``reduce_and_write``): every thread row writes its partials to LDS
  ([accumulators, tile_k, tile_n] f32), one barrier, then each thread sums the rows of dW
  elements of the block. The CTA's elements are one run of dW [K, Y, X, cpg]: e = kl·wg_N +
  (y·X + x)·cpg + c from its first channel's, decomposed per element (a division by wg_N,
  the magic ones by X·cpg and, past one channel per tap, by cpg; once per element per CTA).
* Across CTAs: the split-K contract of the GEMM kernels (``abi.WGRAD_ARGS``, one binary
  for every degree): grid = (channel blocks, 1, degree), slice z reduces [z·ks, min(z·ks +
  ks, wg_K)), an empty slice adds zeros; ``reduction`` none stores, atomic adds (f32, or a
  packed 16-bit pair (e, e + 1) with e even: the channel block is even (validate) and
  ``serves`` keeps the CTA's run even, so a pair never leaves a CTA's range nor dW);
  two-stage (depthwise, 16-bit dW) adds f32 into slab (group, z mod R) of the GEMM
  kernels' workspace [groups, R, wg_M·wg_N], which their stage 2 sums and converts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from wgradcache.kernel.builder import KernelBuilder
from wgradcache.kernel.ir import DType, Value, f32, i32
from wgradcache.model.spec import KernelSpec, elem_bytes, lds_bytes
from wgradcache.wgrad.abi import WGRAD_ARGS, declare
from wgradcache.wgrad.context import divmod_magic, ir_dtype, udiv_const, urem_const
from wgradcache.wgrad.gather import pixel
from wgradcache.wgrad.operand import INVALID_OFFSET

__all__ = ["DirectKernel", "XReader", "open_direct", "stream", "reduce_and_write"]

# What a tap reads of X: (builder, arguments, the tap's byte offset or INVALID_OFFSET, the
# accumulators' dtype) -> the values its accumulators take, each in that dtype, in order.
XReader = Callable[[KernelBuilder, dict[str, Value], Value, DType], list[Value]]


@dataclass(frozen=True)
class DirectKernel:
    """A direct kernel's opening: the builder, its arguments, the thread's lane (along the
    channels) and row (along the reduction), the CTA's first channel, the thread's first
    channel and whether it is inside the channel count, and the CTA's slice."""

    kb: KernelBuilder
    a: dict[str, Value]
    tid: Value
    lane: Value
    row: Value
    c0: Value
    chan: Value
    chan_ok: Value
    k_begin: Value
    k_end: Value


def open_direct(spec: KernelSpec, symbol: str, channels: str) -> DirectKernel:
    """The kernel's arguments, thread coordinates and slice; ``channels``: the argument
    its channel blocks divide (depthwise C, small-C K)."""
    kb = KernelBuilder(symbol, spec.block_size)
    a = declare(kb, WGRAD_ARGS, spec.dtype, spec.dw_dtype)
    lanes = spec.tile_n // spec.vec_a
    tid = kb.thread_id()
    lane, row = urem_const(kb, tid, lanes), udiv_const(kb, tid, lanes)
    c0 = kb.mul(kb.workgroup_id(0), spec.tile_n)
    chan = kb.add(c0, kb.mul(lane, spec.vec_a))
    chan_ok = kb.icmp("slt", chan, a[channels])  # vec_a | it (serves): the whole vector in
    k_begin = kb.mul(kb.workgroup_id(2), a["ks"])
    k_end = kb.smin(kb.add(k_begin, a["ks"]), a["wg_K"])
    return DirectKernel(kb, a, tid, lane, row, c0, chan, chan_ok, k_begin, k_end)


def stream(d: DirectKernel, spec: KernelSpec, px_chan: Value | None, per_tap: int,
           read_x: XReader) -> list[Value]:
    """The thread's accumulators over its positions of the slice (``per_tap`` per compiled
    tap, tap-major): step i of the CTA gives row r position k_begin + i·tile_k + r. Tap
    (y, x) reads pixel (ho·s − p + y·d, wo·s − p + x·d) (at its channel ``px_chan``, or its
    first with None): its row and column are stepped by d, its byte offset by d·W·C·eb per
    row and d·C·eb per column (adds on the position's own offset, a few uniform values: the
    MFMA targets spilled SGPRs holding one per tap). A tap past the problem's Y x X is
    computed all the same and never stored (its dW element does not exist:
    ``reduce_and_write`` stores Y·X taps per channel).

    A run of R = ``spec.wo_run`` > 1 output columns a row (depthwise; ``serves``: stride
    1, dilation 1, R | Wo): row r of step i takes positions k0 .. k0 + R − 1, k0 = k_begin
    + i·tile_k·R + r·R, one output row (k_begin, the slice width and wg_K are multiples of
    R, so a run is whole or past the slice); tap row y reads its T + R − 1 pixels once, and
    column c feeds the products of every (j, x) with j + x = c."""
    kb, a = d.kb, d.a
    taps, vec, eb, run = spec.tile_m, spec.vec_a, elem_bytes(spec.dtype), spec.wo_run
    acc_t = f32.vec(vec) if vec > 1 else f32
    past = kb.const(INVALID_OFFSET, i32)
    col_step = kb.mul(kb.mul(a["dilation"], a["C"]), eb)
    row_step = kb.mul(col_step, a["W"])
    zero = kb.const(0.0, acc_t)
    # the steps are the CTA's (a uniform loop: a scalar branch, no exec-mask loop); the
    # last one's rows past the slice are invalid positions
    with kb.for_(d.k_begin, d.k_end, spec.k_step, carried=[zero] * (taps * taps * per_tap)
                 ) as lp:
        k = kb.add(lp.index, d.row if run == 1 else kb.mul(d.row, run))
        valid = kb.and_(d.chan_ok, kb.icmp("slt", k, d.k_end))
        img, _, _, hs, ws = pixel(kb, a, k)
        dys = []
        for j in range(run):
            kj = k if j == 0 else kb.add(k, j)
            # dY is NHWK over (Ho, Wo): position k's channel c is element k·K + c
            dy_off = kb.select(valid, kb.mul(kb.add(kb.mul(kj, a["K"]), d.chan), eb), past)
            dys.append(kb.convert(kb.bounded_load(a["dy_ptr"], dy_off, a["dy_bytes"], vec,
                                                  align=vec * eb), acc_t))
        h0, w0 = kb.sub(hs, a["pad"]), kb.sub(ws, a["pad"])
        px = kb.mul(kb.add(kb.mul(kb.add(kb.mul(img, a["H"]), h0), a["W"]), w0), a["C"])
        px = px if px_chan is None else kb.add(px, px_chan)
        hy, wx = [h0], [w0]
        for i in range(1, taps + run - 1):  # interleaved: a run of 1 emits the IR it did
            if i < taps:
                hy.append(kb.add(hy[-1], a["dilation"]))
            wx.append(kb.add(wx[-1], a["dilation"]))
        # a tap's bound as an integer mask (INVALID_OFFSET or 0) of its row and column, not
        # a predicate: ptxas spilled a 5x5 kernel's T + T predicates live across the taps
        bad_rows = [kb.select(kb.and_(valid, kb.icmp("ult", h, a["H"])), 0, past) for h in hy]
        bad_cols = [kb.select(kb.icmp("ult", w, a["W"]), 0, past) for w in wx]
        acc = list(lp.carried)
        row_off = kb.mul(px, eb)
        for y in range(taps):
            off = row_off
            for c in range(taps + run - 1):
                # valid: the offset (< 2^31); else INVALID_OFFSET exactly (umin of a value
                # with bit 31 set), never an offset near 2^32 that an access could wrap past
                at = kb.umin(kb.or_(off, kb.or_(bad_rows[y], bad_cols[c])), past)
                xs = read_x(kb, a, at, acc_t)
                for x in range(max(0, c - run + 1), min(taps, c + 1)):
                    first = (y * taps + x) * per_tap
                    for i, xv in enumerate(xs):
                        acc[first + i] = kb.fma(dys[c - x], xv, acc[first + i])
                off = kb.add(off, col_step)
            row_off = kb.add(row_off, row_step)
        lp.yield_(*acc)
    return list(lp.results)


def reduce_and_write(d: DirectKernel, spec: KernelSpec, accs: list[Value], channels: str,
                     per_tap: int, name: str) -> None:
    """Rows' partials through LDS (allocation ``name``), summed per dW element of the
    CTA's channels (of the argument ``channels``), then stored or added into dW (module
    docstring). ``per_tap`` > 1: the accumulators of a tap are its pixel's channels c,
    and a dW element's c is decomposed too."""
    kb, a, row = d.kb, d.a, d.row
    taps, vec, rows, tile_n = spec.tile_m, spec.vec_a, spec.tile_k, spec.tile_n
    part = kb.lds(name, lds_bytes(spec), f32)
    for t, acc in enumerate(accs):
        at = kb.add(kb.mul(kb.add(row, t * rows), tile_n), kb.mul(d.lane, vec))
        kb.store(kb.gep(part, at), acc, align=min(16, 4 * vec))
    kb.barrier()
    dwt = ir_dtype(spec.dw_dtype)
    packed = spec.reduction == "atomic" and spec.dw_dtype != "fp32"
    per = 2 if packed else 1
    block = spec.block_size
    yx = a["wg_N"]  # Y·X·cpg
    here = kb.mul(kb.smin(kb.sub(a[channels], d.c0), tile_n), yx)  # dW elements of the CTA
    first = kb.mul(d.c0, yx)
    two = spec.reduction == "two_stage"
    replica = urem_const(kb, kb.workgroup_id(2), spec.ws_replicas) if two else None
    items = -(-tile_n * taps * taps * per_tap // per)
    for it in range(-(-items // block)):
        e0 = kb.mul(kb.add(d.tid, it * block), per)
        sums, oks, slab = [], [], None
        for u in range(per):
            e = kb.add(e0, u)
            ok = kb.icmp("slt", e, here)
            e = kb.select(ok, e, 0)  # an element past the CTA's reads row 0 of LDS
            cl = kb.udiv(e, yx)
            within = kb.sub(e, kb.mul(cl, yx))  # the element's place in its channel's run
            if two:  # group c0 + cl's replica slab, then that place in it
                slab = kb.mul(kb.add(kb.mul(kb.add(d.c0, cl), spec.ws_replicas), replica), yx)
                slab = kb.add(slab, within)
            yy, xx = divmod_magic(kb, within, a, "Xcpg")
            if per_tap > 1:  # xx is x·cpg + c
                xx, c = divmod_magic(kb, xx, a, "cpg")
            tap = kb.add(kb.mul(yy, taps), xx)
            if per_tap > 1:
                tap = kb.add(kb.mul(tap, per_tap), c)
            base = kb.add(kb.mul(tap, rows * tile_n), cl)
            s = kb.load(kb.gep(part, base))
            for r in range(1, rows):
                s = kb.fadd(s, kb.load(kb.gep(part, kb.add(base, r * tile_n))))
            sums.append(s)
            oks.append(ok)
        if two:  # f32 adds into the workspace [groups, replicas, Y·X·cpg]; stage 2 sums
            kb.atomic_add(kb.gep(a["ws_ptr"], slab), sums[0], pred=oks[0])
            continue
        out = kb.gep(a["dw_ptr"], kb.add(first, e0))
        if spec.reduction == "none":
            kb.store(out, kb.convert(sums[0], dwt), pred=oks[0])
        elif packed:  # e0 even and the CTA's count even: both halves valid together
            kb.atomic_add(out, kb.vec(*(kb.convert(s, dwt) for s in sums)), pred=oks[0])
        else:
            kb.atomic_add(out, sums[0], pred=oks[0])
