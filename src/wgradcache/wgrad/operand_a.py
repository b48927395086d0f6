"""Operand A = dY, read as memory holds it: element (k, m) of the tile is dY[k_wg,
group·kpg + m], stride-1 along m, so a vector of ``vec_a`` runs along kpg (``serves`` makes
vec_a | kpg: a vector never straddles the end of a group's channels).

In the sync loop A reads through a record that starts at the K tile and ends at the slice
(``DyOperand.record``): its row bound is the range check and its offsets are fixed, so an A
vector costs no VALU per tile. In the async loop a tile wholly inside the slice needs no
predicate at all where ``whole_tiles_inside`` holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from wgradcache.kernel.ir import Value, i32, i64
from wgradcache.wgrad.context import WgradContext, all_of
from wgradcache.wgrad.gather import Coords
from wgradcache.wgrad.operand import (
    INVALID_OFFSET,
    Address,
    BoundedLoad,
    Operand,
    or_signs,
    sign_pick,
)
from wgradcache.wgrad.slots import operand_slots, per_column

__all__ = ["DyVector", "DyOperand", "a_operand", "whole_tiles_inside"]


@dataclass(frozen=True)
class DyVector:
    """A slot's loop-invariant addressing in dY: its column inside kpg (``ok``), its element
    offset at row 0 of the K tile (``off``), and either (sync) its byte offset in the tile's
    record, ``INVALID_OFFSET`` where the slot or its column is out (``rec_off``), or (async)
    its offset in a whole tile, a column past M reading the group's first (``off_whole``)."""

    ok: Value
    off: Value
    rec_off: Value | None
    off_whole: Value | None


@dataclass(frozen=True)
class DyOperand(Operand):
    """The dY tile (tile_k × tile_m) of one thread: its slots and their ``DyVector``."""

    vectors: list[DyVector]

    arg = "dy"
    whole_inside = True  # whole_tiles_inside: every chunk of a whole tile lies inside dY

    def at(self, kt: Value, state: list[Coords] | None = None,
           whole: bool = False) -> list[Address]:
        """Per slot (valid predicate, element offset) of K tile ``kt`` (no gather state).

        ``whole``: the tile lies wholly inside the slice (no row bound) and A's offsets
        inside dY (``whole_tiles_inside``): no predicate at all (a column past the tile's M
        edge reads its group's first column, ``off_whole``: what it multiplies lands only in
        output rows that are never stored)."""
        kb, a = self.ctx.kb, self.ctx.a
        k_left = kb.sub(self.ctx.k_end, kt)  # rows k_row < k_left are inside the slice
        kt_off = kb.mul(kt, a["K"])
        out: list[Address] = []
        for slot, v in zip(self.slots, self.vectors, strict=True):
            if whole:
                out.append((None, kb.add(kt_off, v.off_whole)))
                continue
            valid = all_of(kb, slot.ok, v.ok, kb.icmp("slt", slot.k_row, k_left))
            out.append((valid, kb.add(kt_off, v.off)))
        return out

    def bounded(self, kt: Value, state: list[Coords] | None = None) -> list[BoundedLoad]:
        """Every vector at its fixed ``rec_off`` in the record of K tile ``kt``."""
        start, num = self.record(kt)
        return [(v.rec_off, num, start) for v in self.vectors]

    def record(self, kt: Value) -> tuple[Value, Value]:
        """(start, num_bytes) of the record that K tile ``kt``'s loads read: from row kt of
        dY to the slice's end, k_end (none past it: num_bytes 0 once kt >= k_end, as the
        last tile's prefetch asks). dY's rows are K elements, so a vector of row k_row
        (offset k_row·K + col, col + width <= kpg <= K) lies wholly inside the record
        exactly when k_row < k_end - kt: the row bound costs no VALU, and ``rec_off``,
        (k_row·K + col) bytes or ``INVALID_OFFSET`` where the slot or its column is out, is
        fixed for the loop. Both values are workgroup-uniform (one buffer resource)."""
        kb, a = self.ctx.kb, self.ctx.a
        row_bytes = kb.mul(a["K"], self.ctx.eb)
        left = kb.smax(kb.sub(self.ctx.k_end, kt), 0)
        return kb.mul(kt, row_bytes), kb.mul(left, row_bytes)


def a_operand(ctx: WgradContext, width: int) -> DyOperand:
    """The dY tile (tile_k × tile_m), vectors of ``width`` along kpg."""
    kb, a, sp = ctx.kb, ctx.a, ctx.spec
    slots, depth = operand_slots(ctx, sp.tile_m, width, ctx.row_a)
    col0 = kb.add(kb.mul(ctx.group, a["kpg"]), ctx.m0)

    def column(col: Value) -> tuple[Value, Value, Value]:
        """(inside kpg, its sign: negative past kpg, dY's column)."""
        m = kb.add(ctx.m0, col)
        return kb.icmp("slt", m, a["kpg"]), kb.sub(kb.sub(a["kpg"], 1), m), kb.add(col0, col)
    cols = per_column(slots, lambda s: column(s.col))
    offs = [kb.add(kb.mul(s.k_row, a["K"]), col)
            for s, (_, _, col) in zip(slots, cols, strict=True)]
    rec: list[Value | None] = [None] * len(slots)
    whole: list[Value | None] = [None] * len(slots)
    if sp.k_loop == "sync":  # the tile's record moves (DyOperand.record): fixed offsets
        shift = ctx.eb.bit_length() - 1
        past = kb.const(INVALID_OFFSET, i32)
        rec = [sign_pick(kb, or_signs(kb, s.ok_sign, sign), kb.shl(off, shift), past)
               for s, (_, sign, _), off in zip(slots, cols, offs, strict=True)]
    else:  # whole tiles (DyOperand.at): a column past M reads the group's first one
        first = kb.mul(ctx.group, a["kpg"])
        whole = [kb.add(kb.mul(s.k_row, a["K"]), kb.select(ok, col, first))
                 for s, (ok, _, col) in zip(slots, cols, strict=True)]
    vectors = [DyVector(ok, off, r, w)
               for (ok, _, _), off, r, w in zip(cols, offs, rec, whole, strict=True)]
    return DyOperand(ctx, width, slots, 0, depth, vectors)


def whole_tiles_inside(ctx: WgradContext) -> Value:
    """Workgroup-uniform: every A chunk of a tile wholly inside the slice lies inside dY,
    so ``copies.issue_async(whole=True)`` may copy A without a range check. Such a chunk
    reads row k < k_end <= wg_K at columns group·kpg .. + kpg (``off_whole``), inside dY
    when wg_K·K·eb <= dy_bytes, groups·kpg <= K and group < groups: checked once per
    kernel, in 64 bits on the zero-extended arguments (a negative or oversized one fails the
    check; the loop then takes the checked path for every tile)."""
    kb, a = ctx.kb, ctx.a

    def u64(v: Value) -> Value:
        return kb.zext(v, i64)
    rows_bytes = kb.mul(kb.mul(u64(a["wg_K"]), u64(a["K"])), kb.const(ctx.eb, i64))
    return all_of(kb, kb.icmp("ule", rows_bytes, u64(a["dy_bytes"])),
                  kb.icmp("ule", kb.mul(u64(a["groups"]), u64(a["kpg"])), u64(a["K"])),
                  kb.icmp("ult", ctx.group, a["groups"]))
