"""Operand B = X, gathered through the filter taps (``gather``): vectors of ``vec_b`` along
cpg, a column's tap fixed for the loop, a k row's pixel divided per tile or carried.

A B column past the tile's N edge gets the tap row ``gather.OUTSIDE_ROW``, so the tap's own
bound rejects it; a B vector's validity is then its k row and its tap's pixel: compares and
a select up to ``COMPARE_MAX_VECTORS`` a thread, a compare-free sign pick above
(``XOperand.byte_offsets`` says why).

The loops do not divide per K tile where they can carry the gather: ``row_state`` gives
each k row's (wo, ho, pixel offset) once, ``advance`` steps it by tile_k without a division
(``gather.GatherSteps``), and a vector adds its column's tap (``kloop.sync_k_loop`` says
where). The slots of ``slots.row_tile_slots`` / ``slots.kc_row_tile_slots`` put a thread's
vectors in few k rows, one carried state per row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wgradcache.kernel.ir import Value, i32
from wgradcache.wgrad.context import WgradContext, all_of
from wgradcache.wgrad.gather import (
    Coords,
    GatherSteps,
    Tap,
    column_tap,
    pixel,
    pixel_offset,
    row_coords,
    with_offset,
)
from wgradcache.wgrad.operand import (
    INVALID_OFFSET,
    Address,
    BoundedLoad,
    Operand,
    or_signs,
    sign_pick,
)
from wgradcache.wgrad.slots import (
    Slot,
    kc_row_tile_slots,
    operand_slots,
    per_column,
    row_tile_slots,
    transpose_depth,
)

__all__ = ["XOperand", "b_operand", "COMPARE_MAX_VECTORS"]

# B vectors a thread up to which a vector's validity is compares and a select (SGPR lane
# masks on AMD), above it a compare-free sign pick (XOperand.byte_offsets); at wave32,
# half as many at wave64 (a mask is two SGPRs; gfx942 v8x1 spilled 2 SGPRs at 16). With
# compares at any count, 17 of gfx1250's 360 fp16 sync kernels spilled SGPRs (up to 80)
COMPARE_MAX_VECTORS = 16


@dataclass(frozen=True)
class XOperand(Operand):
    """The X tile (tile_k × tile_n) of one thread: its slots, each slot's column ``Tap``
    and, where its slots sit in few k rows, the row of each (one carried state a row)."""

    taps: list[Tap]
    row_of: tuple[int, ...] | None = None  # row_tile_slots: each slot's row of the thread
    # kc_row_tile_slots: k offsets of a group's rows from its first; only the first row of
    # each group is carried, the others derived from it each tile (``_all_rows``)
    derive: tuple[int, ...] | None = None
    steps: GatherSteps = field(init=False)  # the state's uniform steps, per step

    arg = "x"
    whole_inside = False  # a chunk of a whole tile keeps its pixel bound and range check

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps",
                           GatherSteps(self.ctx.kb, self.ctx.a, self.ctx.spec.tile_k))

    def at(self, kt: Value, state: list[Coords] | None = None,
           whole: bool = False) -> list[Address]:
        """Per slot (valid predicate, element offset) of K tile ``kt``; with ``state``
        (``row_state``, advanced): from the one carried row, no division. ``whole``: the
        tile lies wholly inside the slice, so only the tap's pixel bound is left."""
        kb, a = self.ctx.kb, self.ctx.a
        k_left = kb.sub(self.ctx.k_end, kt)  # rows k_row < k_left are inside the slice
        out: list[Address] = []
        if state is not None:  # one carried state per row (row_tile_slots)
            rows = []
            for (ws, hs, row_off), slot in zip(self._all_rows(state), self._row_slots(),
                                               strict=True):
                rows.append((hs, ws, row_off,
                             None if whole else kb.icmp("slt", slot.k_row, k_left)))
            for slot, tap, r in zip(self.slots, self.taps, self.row_of, strict=True):
                hs, ws, row_off, row_ok = rows[r]
                valid = all_of(kb, slot.ok, tap.ok, row_ok,
                               kb.icmp("ult", kb.add(hs, tap.h_base), a["H"]),
                               kb.icmp("ult", kb.add(ws, tap.w_base), a["W"]))
                out.append((valid, kb.add(row_off, tap.offset)))
            return out
        for slot, tap in zip(self.slots, self.taps, strict=True):
            img, _, _, hi, wi = pixel(kb, a, kb.add(kt, slot.k_row), tap.h_base, tap.w_base)
            valid = all_of(kb, slot.ok, tap.ok,
                           None if whole else kb.icmp("slt", slot.k_row, k_left),
                           kb.icmp("ult", hi, a["H"]), kb.icmp("ult", wi, a["W"]))
            pix = pixel_offset(kb, a, img, hi, wi)
            out.append((valid, kb.add(kb.mul(pix, a["C"]), tap.chan)))
        return out

    def bounded(self, kt: Value, state: list[Coords] | None = None) -> list[BoundedLoad]:
        """Every vector at its ``byte_offsets`` in the whole buffer."""
        return [(off, self.nbytes, None) for off in self.byte_offsets(kt, state)]

    def gather_state(self, k0: Value) -> list[Coords]:
        """Per slot, (wo·stride, ho·stride, element offset) of the pixel its k row reads in
        the K tile at ``k0``, from the two magic divisions; ``advance`` steps it a tile on.
        The coordinates are carried times the stride, so a tile's pixel rows and columns
        need no multiply (two v_mul_lo_u32 a row saved per tile)."""
        self.steps.of()  # defined here, before the loop that advances the state
        kb, a = self.ctx.kb, self.ctx.a
        return [row_coords(kb, a, kb.add(k0, slot.k_row), tap)
                for slot, tap in zip(self.slots, self.taps, strict=True)]

    def row_state(self, k0: Value) -> list[Coords]:
        """With ``row_of`` only: per carried k row of the thread (``_row_heads``),
        (wo·stride, ho·stride, pixel offset) in the K tile at ``k0``, the tap left out
        (pixel offset = ((img·H + ho·s)·W + wo·s)·C; a slot adds its column's
        ``Tap.offset``); ``advance`` steps it as any state."""
        self.steps.of()
        d = self.derive or (0,)
        for step in sorted({j - i for i, j in zip(d, d[1:], strict=False)}):
            self.steps.of(step)  # defined here, before the loop
        kb, a = self.ctx.kb, self.ctx.a
        return [row_coords(kb, a, kb.add(k0, slot.k_row), None) for slot in self._row_heads()]

    def advance(self, state: list[Coords]) -> list[Coords]:
        """The gather state one K tile later, without a division (``GatherSteps.advance``)."""
        return self.steps.advance(state)

    def _row_slots(self) -> list[Slot]:
        """The first slot of each row (``row_of``), in row order."""
        heads: dict[int, Slot] = {}
        for s, r in zip(self.slots, self.row_of, strict=True):
            heads.setdefault(r, s)
        return [heads[r] for r in sorted(heads)]

    def _row_heads(self) -> list[Slot]:
        """The first slot of each carried row: every row, or with ``derive`` the first row
        of each group (its k offset 0)."""
        rows = self._row_slots()
        return rows if self.derive is None else rows[::len(self.derive)]

    def _all_rows(self, state: list[Coords]) -> list[Coords]:
        """Every row's (wo·stride, ho·stride, offset) from the carried ones: with
        ``derive``, each group's next row is its previous one stepped by their k distance
        (``advance``: adds and one conditional wrap per coordinate, no division, no
        register carried)."""
        if self.derive is None:
            return list(state)
        out = []
        for head in state:
            row = head
            out.append(row)
            for i, j in zip(self.derive, self.derive[1:], strict=False):
                (row,) = self.steps.advance([row], j - i)
                out.append(row)
        return out

    def byte_offsets(self, kt: Value, state: list[Coords] | None = None) -> list[Value]:
        """Per slot, the byte offset of K tile ``kt``'s vector, or ``INVALID_OFFSET`` where
        it is invalid (never an offset near 2^32 that a 16-byte access could wrap past; a
        valid offset is below 2^31, ``serves``).

        Up to ``COMPARE_MAX_VECTORS`` vectors a thread the pick is a select on compares
        (the k row, the fixed conditions, the tap's pixel inside the image: unsigned hi <
        H, wi < W): on AMD lane masks in SGPRs, ANDed by SALU, one v_cndmask a vector
        (measured: gfx1250 VALU per MMA -10 to -20 % against the sign form). Above it the
        pick is compare-free: the OR of quantities negative exactly where a condition fails
        (k_left - 1 - k_row, H - 1 - hi | hi, ...), its sign spread over the word picks the
        offset; one mask per vector of 32 spilled SGPRs (gfx1250 t32x128x64 v4x4)."""
        kb, a = self.ctx.kb, self.ctx.a
        shift = self.ctx.eb.bit_length() - 1
        k_last = kb.sub(kb.sub(self.ctx.k_end, kt), 1)  # rows k_row <= k_last are inside
        out = []
        if state is None:  # divide per tile (the order LLVM has been measured on)
            for slot, tap in zip(self.slots, self.taps, strict=True):
                img, _, _, hi, wi = pixel(kb, a, kb.add(kt, slot.k_row), tap.h_base,
                                          tap.w_base)
                pix = pixel_offset(kb, a, img, hi, wi)
                out.append(self._valid_or_past(
                    slot, kb.sub(k_last, slot.k_row), hi, wi,
                    kb.shl(kb.add(kb.mul(pix, a["C"]), tap.chan), shift)))
            return out
        if self.row_of is not None:  # one carried state per row (row_tile_slots)
            rows = [(hs, ws, row_off, kb.sub(k_last, slot.k_row))
                    for (ws, hs, row_off), slot in zip(self._all_rows(state), self._row_slots(),
                                                       strict=True)]
            for slot, tap, r in zip(self.slots, self.taps, self.row_of, strict=True):
                hs, ws, row_off, row_sign = rows[r]
                out.append(self._valid_or_past(slot, row_sign, kb.add(hs, tap.h_base),
                                               kb.add(ws, tap.w_base),
                                               kb.shl(kb.add(row_off, tap.offset), shift)))
            return out
        for slot, tap, (ws, hs, elem_off) in zip(self.slots, self.taps, state, strict=True):
            out.append(self._valid_or_past(slot, kb.sub(k_last, slot.k_row),
                                           kb.add(hs, tap.h_base), kb.add(ws, tap.w_base),
                                           kb.shl(elem_off, shift)))
        return out

    def _valid_or_past(self, slot: Slot, row_sign: Value, hi: Value, wi: Value,
                       off: Value) -> Value:
        """``off`` where a B vector is valid (its fixed conditions and its k row's, by their
        signs; its tap's pixel (hi, wi) inside the image), else ``INVALID_OFFSET``: by
        unsigned compares and a select up to ``COMPARE_MAX_VECTORS`` vectors a thread, by
        the compare-free sign pick above it (``byte_offsets``)."""
        kb, a = self.ctx.kb, self.ctx.a
        past = kb.const(INVALID_OFFSET, i32)
        fixed = or_signs(kb, slot.ok_sign, row_sign)  # the thread owns the slot, its k row
        if len(self.slots) * self.ctx.lay.wave_size > COMPARE_MAX_VECTORS * 32:
            bad = or_signs(kb, fixed, hi, kb.sub(kb.sub(a["H"], 1), hi),
                           wi, kb.sub(kb.sub(a["W"], 1), wi))
            return sign_pick(kb, bad, off, past)
        ok = all_of(kb, kb.icmp("sge", fixed, 0), kb.icmp("ult", hi, a["H"]),
                    kb.icmp("ult", wi, a["W"]))
        return kb.select(ok, off, past)


def b_operand(ctx: WgradContext, width: int, max_rows: int = 0) -> XOperand:
    """The X tile (tile_k × tile_n) gathered through the filter taps, vectors along cpg.
    ``max_rows`` (0: off): the slots of ``row_tile_slots`` (K-outer tile) or
    ``kc_row_tile_slots`` (K-contiguous) where they give a thread at most that many k rows
    (groups, derived past it)."""
    kb, a, sp = ctx.kb, ctx.a, ctx.spec
    rows, depth, derive = None, 0, None
    if max_rows and not ctx.k_contiguous:
        rows = row_tile_slots(ctx, sp.tile_n, width, ctx.row_b, max_rows)
    elif max_rows:
        depth = transpose_depth(sp.tile_k, sp.tile_n, width, sp.block_size, ctx.lay.k)
        rows = kc_row_tile_slots(ctx, sp.tile_n, width, depth, max_rows)
        derive = rows[2] if rows is not None else None
    slots, depth = (rows[0], depth) if rows is not None else \
        operand_slots(ctx, sp.tile_n, width, ctx.row_b)
    chan0 = kb.mul(ctx.group, a["cpg"])
    taps = per_column(slots, lambda s: column_tap(ctx, chan0, s.col))
    if rows is not None:  # each column's offset from its k row's pixel (row_state)
        return XOperand(ctx, width, slots, ctx.b_offset, depth,
                        [with_offset(kb, a, t) for t in taps], row_of=rows[1], derive=derive)
    return XOperand(ctx, width, slots, ctx.b_offset, depth, taps)
