"""Epilogues: accumulators -> dW (store, float atomic, packed 16-bit atomic) or the
two-stage f32 workspace.

* default: each lane writes its own accumulator elements (C/D lane map of ``kernel/mma.py``).
  A 16-bit split-K partial goes out as a packed ``<2 x half|bfloat>`` atomic whose partner
  half is +0 (adding zero is exact), at the pair-aligned address: AMD lanes hold one column
  each, so the pair's other element belongs to the neighbour lane. Where a lane holds
  columns (c, c+1) of a row in two slots (NVIDIA m16n8k16), the pair is its own two values.
* cshuffle: accumulators go through LDS (f32 tile_m × tile_n, row-major, over the operand
  bytes after the K loop's last barrier) and leave as row-major vectors of ``store_vec``;
  a 16-bit split-K partial becomes real pairs.
* two-stage (stage 1): float atomics into slab group·R + z mod R of the workspace, guarded by
  the element's predicate (never an atomic to a sentinel address: that still faults).

Out-of-range elements (partial M/N tiles) are predicated off.
"""

from __future__ import annotations

from wgradcache.kernel.ir import Value, f32
from wgradcache.wgrad.context import WgradContext, all_of, ir_dtype, udiv_const, urem_const
from wgradcache.wgrad.kloop import atoms

__all__ = ["default_epilogue", "cshuffle_epilogue"]


def _lane_offsets(ctx: WgradContext, m: Value, n_base) -> tuple[Value, Value]:
    """(m, n_base()) plus the lane's C/D position at slot offset 0 (``kernel/mma.py``'s c
    map); ``n_base`` is called after m is complete (the IR's value order)."""
    kb, lay = ctx.kb, ctx.lay
    if lay.c_row_mn:
        m = kb.add(m, kb.mul(ctx.lane_mn, lay.c_row_mn))
    if lay.c_row_group_stride or not lay.c_row_mn:
        m = kb.add(m, kb.mul(ctx.lane_grp, lay.c_row_group_stride))
    n = n_base()
    if lay.c_col_mn:
        n = kb.add(n, ctx.lane_mn if lay.c_col_mn == 1 else kb.mul(ctx.lane_mn, lay.c_col_mn))
    if lay.c_col_group_stride:
        n = kb.add(n, kb.mul(ctx.lane_grp, lay.c_col_group_stride))
    return m, n


def _lane_coords(ctx: WgradContext) -> tuple[Value, Value]:
    """(row, col) of this lane's slot 0 of atom (0, 0), in the group's GEMM (before the
    slot's own row and column offsets)."""
    kb = ctx.kb
    m = kb.add(ctx.m0, kb.mul(ctx.wave_m, ctx.sub_m))
    return _lane_offsets(ctx, m, lambda: kb.add(ctx.n0, kb.mul(ctx.wave_n, ctx.sub_n)))


def _slot_pairs(ctx: WgradContext) -> bool:
    """Whether C/D slots (2p, 2p+1) are one row's columns (c, c+1) at an even c for every
    lane (m16n8k16): a 16-bit split-K partial then goes out as the lane's own real pair."""
    lay = ctx.lay
    offs = lay.c_col_offsets
    if not offs or lay.c_col_mn % 2 or lay.c_col_group_stride % 2:
        return False
    return all(offs[r] % 2 == 0 and offs[r + 1] == offs[r] + 1
               and lay.c_row_offsets[r] == lay.c_row_offsets[r + 1]
               for r in range(0, lay.c_elems, 2))


def _row_base(ctx: WgradContext, m: Value) -> Value:
    """Flat index of (m, 0) in the target: dW [groups, wg_M, wg_N] or a workspace slab."""
    kb, a, sp = ctx.kb, ctx.a, ctx.spec
    if sp.reduction == "two_stage":
        slab = kb.add(kb.mul(ctx.group, sp.ws_replicas), urem_const(kb, ctx.z, sp.ws_replicas))
    else:
        slab = ctx.group
    return kb.mul(kb.add(kb.mul(slab, a["wg_M"]), m), a["wg_N"])


def _target(ctx: WgradContext) -> Value:
    return ctx.a["ws_ptr" if ctx.spec.reduction == "two_stage" else "dw_ptr"]


def _packed16(ctx: WgradContext) -> bool:
    return ctx.spec.reduction == "atomic" and ctx.spec.dw_dtype != "fp32"


def default_epilogue(ctx: WgradContext, accs: list[Value]) -> None:
    kb, lay, a, sp = ctx.kb, ctx.lay, ctx.a, ctx.spec
    am, an = atoms(ctx)
    m_lane, n_lane = _lane_coords(ctx)
    out = _target(ctx)
    col_offs = sorted({lay.col_offset(r) for r in range(lay.c_elems)})
    cols = {(j, c): kb.add(n_lane, lay.n * j + c) if lay.n * j + c else n_lane
            for c in col_offs for j in range(an)}
    col_ok = {key: kb.icmp("slt", c, a["wg_N"]) for key, c in cols.items()}
    dwt = ir_dtype(sp.dw_dtype)
    paired = _packed16(ctx) and _slot_pairs(ctx)
    if _packed16(ctx) and not paired:
        odd_i = kb.and_(ctx.lane, 1)  # n's parity: every other term of n is even
        odd = kb.icmp("ne", odd_i, 0)
        zero = kb.const(0.0, dwt)
    for i in range(am):
        for r, roff in enumerate(lay.c_row_offsets):
            if paired and r % 2:
                continue  # stored with slot r - 1
            m = kb.add(m_lane, lay.m * i + roff)
            row_ok = kb.icmp("slt", m, a["wg_M"])
            base = _row_base(ctx, m)
            for j in range(an):
                key = (j, lay.col_offset(r))
                v = kb.extract(accs[i * an + j], r)
                ok = kb.and_(row_ok, col_ok[key])
                flat = kb.add(base, cols[key])
                if sp.reduction == "none":
                    kb.store(kb.gep(out, flat), kb.convert(v, dwt), pred=ok)
                elif paired:  # (c, c+1) with c even and wg_N even: both in range
                    pair = kb.vec(kb.convert(v, dwt),
                                  kb.convert(kb.extract(accs[i * an + j], r + 1), dwt))
                    kb.atomic_add(kb.gep(out, flat), pair, pred=ok)
                elif _packed16(ctx):
                    h = kb.convert(v, dwt)
                    pair = kb.select(odd, kb.vec(zero, h), kb.vec(h, zero))
                    kb.atomic_add(kb.gep(out, kb.sub(flat, odd_i)), pair, pred=ok)
                else:  # fp32 dW atomic or the f32 workspace
                    kb.atomic_add(kb.gep(out, flat), v, pred=ok)


def cshuffle_epilogue(ctx: WgradContext, accs: list[Value]) -> None:
    kb, lay, a, sp = ctx.kb, ctx.lay, ctx.a, ctx.spec
    am, an = atoms(ctx)
    stage = kb.ptr_cast(ctx.smem, f32)
    kb.barrier()  # both K loops end without one: other waves may still read operands
    # accumulators -> staging [tile_m, tile_n] f32
    m_l, n_l = _lane_offsets(ctx, kb.mul(ctx.wave_m, ctx.sub_m),
                             lambda: kb.mul(ctx.wave_n, ctx.sub_n))
    lane_ptr = kb.gep(stage, kb.add(kb.mul(m_l, sp.tile_n), n_l))
    for i in range(am):
        for j in range(an):
            for r, roff in enumerate(lay.c_row_offsets):
                off = (lay.m * i + roff) * sp.tile_n + lay.n * j + lay.col_offset(r)
                kb.store(kb.gep(lane_ptr, off), kb.extract(accs[i * an + j], r))
    kb.barrier()
    # staging -> dW, row-major vectors of store_vec
    sv = sp.store_vec
    per_row = sp.tile_n // sv
    total = sp.tile_m * per_row
    dwt = ir_dtype(sp.dw_dtype)
    for s in range(-(-total // sp.block_size)):
        idx = kb.add(ctx.tid, s * sp.block_size) if s else ctx.tid
        have = kb.icmp("ult", idx, total) if (s + 1) * sp.block_size > total else None
        row = udiv_const(kb, idx, per_row)
        col = kb.mul(urem_const(kb, idx, per_row), sv)
        v = kb.load(kb.gep(stage, kb.add(kb.mul(row, sp.tile_n), col)), sv, pred=have,
                    align=4 * sv)
        m, n = kb.add(ctx.m0, row), kb.add(ctx.n0, col)
        ok = all_of(kb, have, kb.icmp("slt", m, a["wg_M"]), kb.icmp("slt", n, a["wg_N"]))
        flat = kb.add(_row_base(ctx, m), n)
        p = kb.gep(_target(ctx), flat)
        if sp.reduction == "none":
            kb.store(p, kb.convert(v, dwt), pred=ok, align=sv * dwt.itemsize)
        elif _packed16(ctx):
            h = kb.convert(v, dwt)
            for e in range(0, sv, 2):
                kb.atomic_add(kb.gep(p, e) if e else p, kb.subvec(h, e, 2), pred=ok)
        else:
            for e in range(sv):
                kb.atomic_add(kb.gep(p, e) if e else p, kb.extract(v, e), pred=ok)
