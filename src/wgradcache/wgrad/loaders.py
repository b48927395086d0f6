"""Global -> LDS tile loaders of the two operands, sync (through registers) and async.

A = dY: element (k, m) of the tile is dY[k_wg, group·kpg + m]: stride-1 along m, so a
vector of ``vec_a`` runs along kpg (``serves`` makes vec_a | kpg: a vector never straddles
the end of a group's channels). B = X gathered implicitly: element (k, n) with
k_wg -> (n_img, ho, wo) and n_wg -> (y, x, c) reads X[n_img, ho·s − p + y·d, wo·s − p + x·d,
group·cpg + c]: stride-1 along c, vectors of ``vec_b`` | cpg never cross a (y, x) tap.

Every out-of-range element (reduction tail, padding, stride/dilation holes, partial M/N
tiles) reads zero without a branch. The sync loop's loads are bounded loads (a buffer
resource on AMD, DESIGN §4): an invalid vector gets the byte offset 0x80000000, past every
buffer ``serves`` admits, and the hardware's range check returns zeros; no exec-mask branch
per vector. The async copies have no range check: their predicate is explicit
(``async_chunk_predicate``) and picks, by selects, where an unpredicated copy and an
unpredicated zero store land (``copy_or_zero_fill``): no exec-mask branch either; on
NVIDIA it is the copy's src-size (cp.async lands zeros itself). Offsets
of valid elements fit 31 bits (``serves`` bounds every buffer), so i32 arithmetic is exact
there; for invalid ones it may wrap, harmlessly, since the offset is replaced (sync: past
the range; async: 0, the copy landing in a scratch slot).

In the sync loop A reads through a record that starts at the K tile and ends at the slice
(``OperandLoad.record``): its row bound is the range check and its offsets are fixed, so
an A vector costs no VALU per tile. A B column past the tile's N edge gets the tap row
``OUTSIDE_ROW``, so the tap's own bound rejects it; a B vector's validity is then its k
row and its tap's pixel: compares and a select up to ``COMPARE_MAX_VECTORS`` a thread, a
compare-free sign pick above (``OperandLoad.byte_offsets`` says why).

The sync loop does not divide per K tile where it can carry the gather: ``row_state``
gives each k row's (wo, ho, pixel offset) once, ``advance`` steps it by tile_k without a
division, and a vector adds its column's tap (``kloop.sync_k_loop`` says where).

Which vectors a thread moves, and where they land in LDS: ``slots``.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field

from wgradcache.kernel.builder import KernelBuilder
from wgradcache.kernel.ir import Value, i1, i8, i32, i64
from wgradcache.model.targets import get_target
from wgradcache.wgrad.context import WgradContext, all_of, divmod_magic
from wgradcache.wgrad.slots import (
    Slot,
    kc_row_tile_slots,
    operand_slots,
    per_column,
    row_tile_slots,
    transpose_depth,
)

__all__ = ["OperandLoad", "INVALID_OFFSET", "a_operand", "b_operand", "load_sync", "store_sync",
           "issue_async", "async_chunk_predicate", "copy_or_zero_fill", "whole_tiles_inside"]


# B vectors a thread up to which a vector's validity is compares and a select (SGPR lane
# masks on AMD), above it a compare-free sign pick (OperandLoad.byte_offsets); at wave32,
# half as many at wave64 (a mask is two SGPRs; gfx942 v8x1 spilled 2 SGPRs at 16). With
# compares at any count, 17 of gfx1250's 360 fp16 sync kernels spilled SGPRs (up to 80)
COMPARE_MAX_VECTORS = 16


@dataclass
class OperandLoad:
    """Per-thread, loop-invariant part of one operand's loads; ``at(kt)`` gives, per slot,
    the (valid predicate, element offset) of K tile ``kt``."""

    ctx: WgradContext
    name: str  # "dy" | "x"
    width: int
    slots: list[Slot]
    hoisted: list[dict]
    lds_base: int  # element offset of this operand's tile inside a stage
    depth: int = 0  # k rows per transposed group (K-contiguous tile); 0: K-outer tile
    step_vals: dict[int, tuple[Value, ...]] = field(default_factory=dict)  # _steps, per step
    row_of: tuple[int, ...] | None = None  # B, row_tile_slots: each slot's row of the thread
    # kc_row_tile_slots: k offsets of a group's rows from its first; only the first row of
    # each group is carried, the others derived from it each tile (``_all_rows``)
    derive: tuple[int, ...] | None = None

    @property
    def buf(self) -> Value:
        return self.ctx.a[f"{self.name}_ptr"]

    @property
    def nbytes(self) -> Value:
        return self.ctx.a[f"{self.name}_bytes"]

    def at(self, kt: Value, state: list[tuple[Value, Value, Value]] | None = None,
           whole: bool = False) -> list[tuple[Value | None, Value]]:
        """Per slot (valid predicate, element offset) of K tile ``kt``; B with ``state``
        (``row_state``, advanced): from the one carried row, no division.

        ``whole``: the tile lies wholly inside the slice (no row bound) and A's offsets
        inside dY (``whole_tiles_inside``): A needs no predicate at all (a column past the
        tile's M edge reads its group's first column, ``off_whole``: what it multiplies
        lands only in output rows that are never stored), B only its tap's pixel bound."""
        kb, a = self.ctx.kb, self.ctx.a
        k_left = kb.sub(self.ctx.k_end, kt)  # rows k_row < k_left are inside the slice
        out = []
        if self.name == "dy":
            kt_off = kb.mul(kt, a["K"])
            for slot, h in zip(self.slots, self.hoisted, strict=True):
                if whole:
                    out.append((None, kb.add(kt_off, h["off_whole"])))
                    continue
                valid = all_of(kb, slot.ok, h["col_ok"], kb.icmp("slt", slot.k_row, k_left))
                out.append((valid, kb.add(kt_off, h["off"])))
            return out
        if state is not None:  # one carried state per row (row_tile_slots)
            rows = []
            for (ws, hs, row_off), slot in zip(self._all_rows(state), self._row_slots(),
                                               strict=True):
                rows.append((hs, ws, row_off,
                             None if whole else kb.icmp("slt", slot.k_row, k_left)))
            for slot, h, r in zip(self.slots, self.hoisted, self.row_of, strict=True):
                hs, ws, row_off, row_ok = rows[r]
                valid = all_of(kb, slot.ok, h["col_ok"], row_ok,
                               kb.icmp("ult", kb.add(hs, h["h_base"]), a["H"]),
                               kb.icmp("ult", kb.add(ws, h["w_base"]), a["W"]))
                out.append((valid, kb.add(row_off, h["tap"])))
            return out
        for slot, h in zip(self.slots, self.hoisted, strict=True):
            k = kb.add(kt, slot.k_row)
            img, r = divmod_magic(kb, k, a, "HoWo")
            ho, wo = divmod_magic(kb, r, a, "Wo")
            hi = kb.add(kb.mul(ho, a["stride"]), h["h_base"])
            wi = kb.add(kb.mul(wo, a["stride"]), h["w_base"])
            valid = all_of(kb, slot.ok, h["col_ok"],
                           None if whole else kb.icmp("slt", slot.k_row, k_left),
                           kb.icmp("ult", hi, a["H"]), kb.icmp("ult", wi, a["W"]))
            pix = kb.add(kb.mul(kb.add(kb.mul(img, a["H"]), hi), a["W"]), wi)
            out.append((valid, kb.add(kb.mul(pix, a["C"]), h["chan"])))
        return out


    def record(self, kt: Value) -> tuple[Value, Value]:
        """A only: (start, num_bytes) of the record that K tile ``kt``'s loads read: from
        row kt of dY to the slice's end, k_end (none past it: num_bytes 0 once kt >= k_end,
        as the last tile's prefetch asks). dY's rows are K elements, so a vector of row
        k_row (offset k_row·K + col, col + width <= kpg <= K) lies wholly inside the record
        exactly when k_row < k_end - kt: the row bound costs no VALU, and ``rec_off``,
        (k_row·K + col) bytes or ``INVALID_OFFSET`` where the slot or its column is out,
        is fixed for the loop. Both values are workgroup-uniform (one buffer resource)."""
        kb, a = self.ctx.kb, self.ctx.a
        row_bytes = kb.mul(a["K"], self.ctx.eb)
        left = kb.smax(kb.sub(self.ctx.k_end, kt), 0)
        return kb.mul(kt, row_bytes), kb.mul(left, row_bytes)

    def gather_state(self, k0: Value) -> list[tuple[Value, Value, Value]]:
        """B only: per slot, (wo·stride, ho·stride, element offset) of the pixel its k row
        reads in the K tile at ``k0``, from the two magic divisions; ``advance`` steps it a
        tile on. The coordinates are carried times the stride, so a tile's pixel rows and
        columns need no multiply (two v_mul_lo_u32 a row saved per tile)."""
        self._steps()  # defined here, before the loop that advances the state
        return self._coords(k0)

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

    def row_state(self, k0: Value) -> list[tuple[Value, Value, Value]]:
        """B with ``row_of`` only: per carried k row of the thread (``_row_heads``),
        (wo·stride, ho·stride, pixel offset) in the K tile at ``k0``, the tap left out
        (pixel offset = ((img·H + ho·s)·W + wo·s)·C; a slot adds its column's ``tap``);
        ``advance`` steps it as any state."""
        self._steps()
        d = self.derive or (0,)
        for step in sorted({j - i for i, j in zip(d, d[1:], strict=False)}):
            self._steps(step)  # defined here, before the loop
        return [self._gather_coords(k0, slot, None) for slot in self._row_heads()]

    def _all_rows(self, state: list[tuple[Value, Value, Value]]
                  ) -> list[tuple[Value, Value, Value]]:
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
                (row,) = self.advance([row], j - i)
                out.append(row)
        return out

    def _coords(self, k0: Value) -> list[tuple[Value, Value, Value]]:
        return [self._gather_coords(k0, slot, h)
                for slot, h in zip(self.slots, self.hoisted, strict=True)]

    def _gather_coords(self, k0: Value, slot: Slot, h: dict | None
                       ) -> tuple[Value, Value, Value]:
        """(wo·stride, ho·stride, element offset) of ``slot``'s k row in the K tile at
        ``k0``, by the two magic divisions; ``h``: the column's tap and channel added
        (None: the row's pixel alone, ``row_state``)."""
        kb, a = self.ctx.kb, self.ctx.a
        img, r = divmod_magic(kb, kb.add(k0, slot.k_row), a, "HoWo")
        ho, wo = divmod_magic(kb, r, a, "Wo")
        hi = kb.mul(ho, a["stride"])
        hi = hi if h is None else kb.add(hi, h["h_base"])
        wi = kb.mul(wo, a["stride"])
        wi = wi if h is None else kb.add(wi, h["w_base"])
        pix = kb.add(kb.mul(kb.add(kb.mul(img, a["H"]), hi), a["W"]), wi)
        off = kb.mul(pix, a["C"])
        return kb.mul(wo, a["stride"]), kb.mul(ho, a["stride"]), \
            (off if h is None else kb.add(off, h["chan"]))

    def advance(self, state: list[tuple[Value, Value, Value]], step: int | None = None
                ) -> list[tuple[Value, Value, Value]]:
        """``gather_state`` one K tile (or ``step`` k rows) later, without a division:
        tile_k = q·HoWo + b·Wo + c (uniform, once per kernel), so wo + c and ho + b + carry
        each wrap at most once (wo, c < Wo; ho, b < Ho) and the offset moves by one of four
        uniform deltas. The state holds wo and ho times the stride s, so the steps and the
        bounds are scaled too (c·s, b·s, s, Wo·s, Ho·s: uniform). The offset is exact
        modulo 2^32, so exact wherever the vector is valid (< 2^31)."""
        kb, a = self.ctx.kb, self.ctx.a
        b, c, d0, d1, d2, wo_s, ho_s = self._steps(step)
        out = []
        for ws, hs, off in state:
            ws1 = kb.add(ws, c)
            cy1 = kb.icmp("uge", ws1, wo_s)
            hs1 = kb.add(kb.add(hs, b), kb.select(cy1, a["stride"], 0))
            cy2 = kb.icmp("uge", hs1, ho_s)
            off1 = kb.add(kb.add(off, d0), kb.add(kb.select(cy1, d1, 0), kb.select(cy2, d2, 0)))
            out.append((kb.select(cy1, kb.sub(ws1, wo_s), ws1),
                        kb.select(cy2, kb.sub(hs1, ho_s), hs1), off1))
        return out

    def _steps(self, step: int | None = None) -> tuple[Value, ...]:
        """step (default tile_k) = q·HoWo + b·Wo + c, and the offset's deltas: d0 for (q,
        b, c), d1 more where wo wraps (ho + 1, wo − Wo), d2 more where ho wraps (img + 1,
        ho − Ho); b, c and the wrap bounds Wo, Ho come times the stride (``advance``)."""
        step = self.ctx.spec.tile_k if step is None else step
        if step not in self.step_vals:
            kb, a = self.ctx.kb, self.ctx.a
            q, r = divmod_magic(kb, kb.const(step, i32), a, "HoWo")
            b, c = divmod_magic(kb, r, a, "Wo")
            s_c = kb.mul(a["stride"], a["C"])
            s_wc = kb.mul(s_c, a["W"])
            hwc = kb.mul(kb.mul(a["H"], a["W"]), a["C"])
            d0 = kb.add(kb.add(kb.mul(q, hwc), kb.mul(b, s_wc)), kb.mul(c, s_c))
            d1 = kb.sub(s_wc, kb.mul(a["Wo"], s_c))
            d2 = kb.sub(hwc, kb.mul(a["Ho"], s_wc))
            s = a["stride"]
            self.step_vals[step] = (kb.mul(b, s), kb.mul(c, s), d0, d1, d2,
                                    kb.mul(a["Wo"], s), kb.mul(a["Ho"], s))
        return self.step_vals[step]

    def byte_offsets(self, kt: Value, state: list[tuple[Value, Value, Value]] | None = None
                     ) -> list[Value]:
        """B only (A reads through ``record``): per slot, the byte offset of K tile ``kt``'s
        vector, or ``INVALID_OFFSET`` where it is invalid (never an offset near 2^32 that a
        16-byte access could wrap past; a valid offset is below 2^31, ``serves``).

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
            for slot, h in zip(self.slots, self.hoisted, strict=True):
                img, r = divmod_magic(kb, kb.add(kt, slot.k_row), a, "HoWo")
                ho, wo = divmod_magic(kb, r, a, "Wo")
                hi = kb.add(kb.mul(ho, a["stride"]), h["h_base"])
                wi = kb.add(kb.mul(wo, a["stride"]), h["w_base"])
                pix = kb.add(kb.mul(kb.add(kb.mul(img, a["H"]), hi), a["W"]), wi)
                out.append(self._valid_or_past(
                    slot, h, kb.sub(k_last, slot.k_row), hi, wi,
                    kb.shl(kb.add(kb.mul(pix, a["C"]), h["chan"]), shift)))
            return out
        if self.row_of is not None:  # one carried state per row (row_tile_slots)
            rows = [(hs, ws, row_off, kb.sub(k_last, slot.k_row))
                    for (ws, hs, row_off), slot in zip(self._all_rows(state), self._row_slots(),
                                                       strict=True)]
            for slot, h, r in zip(self.slots, self.hoisted, self.row_of, strict=True):
                hs, ws, row_off, row_sign = rows[r]
                out.append(self._valid_or_past(slot, h, row_sign, kb.add(hs, h["h_base"]),
                                               kb.add(ws, h["w_base"]),
                                               kb.shl(kb.add(row_off, h["tap"]), shift)))
            return out
        for slot, h, (ws, hs, elem_off) in zip(self.slots, self.hoisted, state, strict=True):
            out.append(self._valid_or_past(slot, h, kb.sub(k_last, slot.k_row),
                                           kb.add(hs, h["h_base"]), kb.add(ws, h["w_base"]),
                                           kb.shl(elem_off, shift)))
        return out

    def _valid_or_past(self, slot: Slot, h: dict, row_sign: Value, hi: Value, wi: Value,
                       off: Value) -> Value:
        """``off`` where a B vector is valid (its fixed conditions and its k row's, by their
        signs; its tap's pixel (hi, wi) inside the image), else ``INVALID_OFFSET``: by
        unsigned compares and a select up to ``COMPARE_MAX_VECTORS`` vectors a thread, by
        the compare-free sign pick above it (``byte_offsets``)."""
        kb, a = self.ctx.kb, self.ctx.a
        past = kb.const(INVALID_OFFSET, i32)
        fixed = _or_all(kb, self._fixed_sign(slot, h), row_sign)
        if len(self.slots) * self.ctx.lay.wave_size > COMPARE_MAX_VECTORS * 32:
            bad = _or_all(kb, fixed, hi, kb.sub(kb.sub(a["H"], 1), hi),
                          wi, kb.sub(kb.sub(a["W"], 1), wi))
            return _pick(kb, bad, off, past)
        ok = all_of(kb, kb.icmp("sge", fixed, 0), kb.icmp("ult", hi, a["H"]),
                    kb.icmp("ult", wi, a["W"]))
        return kb.select(ok, off, past)

    def _fixed_sign(self, slot: Slot, h: dict) -> Value:
        """The loop-invariant conditions (the thread owns the slot, its column is inside)."""
        return _or_all(self.ctx.kb, slot.ok_sign, h["col_sign"])


def _pick(kb: KernelBuilder, bad: Value, off: Value, past: Value) -> Value:
    """``past`` where ``bad`` < 0, else ``off``: (m & past) | (~m & off), m = bad >> 31."""
    m = kb.ashr(bad, 31)
    return kb.or_(kb.and_(m, past), kb.and_(kb.not_(m), off))


def _or_all(kb: KernelBuilder, *xs: Value | None) -> Value:
    out = None
    for x in xs:
        if x is not None:
            out = x if out is None else kb.or_(out, x)
    return out


def a_operand(ctx: WgradContext, width: int) -> OperandLoad:
    """dY tile (tile_k × tile_m), vectors of ``width`` along kpg."""
    kb, a, sp = ctx.kb, ctx.a, ctx.spec
    slots, depth = operand_slots(ctx, sp.tile_m, width, ctx.row_a)
    col0 = kb.add(kb.mul(ctx.group, a["kpg"]), ctx.m0)

    def cols(s: Slot) -> dict:
        m = kb.add(ctx.m0, s.col)
        return {"col_ok": kb.icmp("slt", m, a["kpg"]), "col_sign": kb.sub(kb.sub(a["kpg"], 1), m),
                "col": kb.add(col0, s.col)}
    hoisted = [{**h, "off": kb.add(kb.mul(s.k_row, a["K"]), h["col"])}
               for s, h in zip(slots, per_column(slots, cols), strict=True)]
    if sp.k_loop == "sync":  # the tile's record moves (OperandLoad.record): fixed offsets
        shift = ctx.eb.bit_length() - 1
        past = kb.const(INVALID_OFFSET, i32)
        hoisted = [{**h, "rec_off": _pick(kb, _or_all(kb, s.ok_sign, h["col_sign"]),
                                          kb.shl(h["off"], shift), past)}
                   for s, h in zip(slots, hoisted, strict=True)]
    else:  # whole tiles (OperandLoad.at): a column past M reads the group's first one
        first = kb.mul(ctx.group, a["kpg"])
        hoisted = [{**h, "off_whole": kb.add(kb.mul(s.k_row, a["K"]),
                                             kb.select(h["col_ok"], h["col"], first))}
                   for s, h in zip(slots, hoisted, strict=True)]
    return OperandLoad(ctx, "dy", width, slots, hoisted, 0, depth)


def b_operand(ctx: WgradContext, width: int, max_rows: int = 0) -> OperandLoad:
    """X tile (tile_k × tile_n) gathered through the filter taps, vectors along cpg.
    ``max_rows`` (K-outer tile only; 0: off): the slots of ``row_tile_slots`` where it
    gives a thread at most that many k rows."""
    kb, a, sp = ctx.kb, ctx.a, ctx.spec
    rows, depth, derive = None, 0, None
    if max_rows and not ctx.k_contiguous:
        rows = row_tile_slots(kb, ctx.tid, sp.block_size, sp.tile_k, sp.tile_n, width,
                              ctx.row_b, ctx.eb, max_rows)
    elif max_rows:
        depth = transpose_depth(sp.tile_k, sp.tile_n, width, sp.block_size, ctx.lay.k)
        rows = kc_row_tile_slots(kb, ctx.tid, sp.block_size, sp.tile_k, sp.tile_n, width,
                                 ctx.row_k, ctx.lay, depth, ctx.eb, max_rows)
        derive = rows[2] if rows is not None else None
    slots, depth = (rows[0], depth) if rows is not None else \
        operand_slots(ctx, sp.tile_n, width, ctx.row_b)
    chan0 = kb.mul(ctx.group, a["cpg"])

    def cols(s: Slot) -> dict:
        # a column past wg_N gets the tap row OUTSIDE_ROW: its pixel row hi = ho·s +
        # OUTSIDE_ROW is negative for every ho·s < 2^31, so the tap's bound (hi < H,
        # unsigned) fails and the column needs no condition of its own in the loop
        n = kb.add(ctx.n0, s.col)
        y, r = divmod_magic(kb, n, a, "Xcpg")
        x, c = divmod_magic(kb, r, a, "cpg")
        ok = kb.icmp("slt", n, a["wg_N"])
        return {"col_ok": ok, "col_sign": None,
                "h_base": kb.select(ok, kb.sub(kb.mul(y, a["dilation"]), a["pad"]),
                                    OUTSIDE_ROW),
                "w_base": kb.sub(kb.mul(x, a["dilation"]), a["pad"]),
                "chan": kb.add(chan0, c)}

    def with_tap(h: dict) -> dict:  # the column's offset from its k row's pixel (row_state)
        tap = kb.add(kb.mul(h["h_base"], a["W"]), h["w_base"])
        return {**h, "tap": kb.add(kb.mul(tap, a["C"]), h["chan"])}
    if rows is not None:
        hoisted = [with_tap(h) for h in per_column(slots, cols)]
        return OperandLoad(ctx, "x", width, slots, hoisted, ctx.b_offset, depth, row_of=rows[1],
                           derive=derive)
    return OperandLoad(ctx, "x", width, slots, per_column(slots, cols), ctx.b_offset, depth)


# ---- sync: global -> registers -> LDS ------------------------------------------------------

INVALID_OFFSET = 0x80000000  # past every buffer serves admits (< 2^31 bytes), any access size
OUTSIDE_ROW = -(1 << 31)  # b_operand: the tap row of a column past the tile's N edge


def load_sync(op: OperandLoad, kt: Value,
              state: list[tuple[Value, Value, Value]] | None = None) -> list[Value]:
    """The operand's vectors of K tile ``kt`` in registers (zeros where invalid): bounded
    loads, an invalid vector at a byte offset >= ``INVALID_OFFSET`` (no branch, no compare:
    ``OperandLoad.byte_offsets``). A (dY) reads through a record that starts at the tile
    and ends at the slice (``OperandLoad.record``): its offsets are loop-invariant, and the
    slice's row bound is the hardware's range check."""
    kb = op.ctx.kb
    align = op.width * op.ctx.eb
    if op.name == "dy":
        start, num = op.record(kt)
        return [kb.bounded_load(op.buf, h["rec_off"], num, op.width, align=align, base=start)
                for h in op.hoisted]
    return [kb.bounded_load(op.buf, off, op.nbytes, op.width, align=align)
            for off in op.byte_offsets(kt, state)]


def store_sync(op: OperandLoad, regs: list[Value], lds: Value) -> None:
    """Registers -> the LDS tile: one wide store per vector (K-outer), or per transposed
    group ``width`` stores of ``depth`` k values, one per column (K-contiguous)."""
    kb = op.ctx.kb
    if not op.depth:
        align = op.width * op.ctx.eb
        for slot, v in zip(op.slots, regs, strict=True):
            at = kb.gep(lds, kb.add(slot.lds_off, op.lds_base))
            if slot.ok is not None and slot.ok_uniform:  # a scalar branch, no exec mask
                with kb.if_(slot.ok, uniform=op.ctx.lay.wave_size):
                    kb.store(at, v, align=align)
            else:
                kb.store(at, v, pred=slot.ok, align=align)
        return
    d, row = op.depth, op.ctx.row_k
    for g in range(0, len(op.slots), d):
        head, vecs = op.slots[g], regs[g:g + d]
        # a ragged group: one region around its ``width`` stores, not a branch per store
        uniform = op.ctx.lay.wave_size if head.ok_uniform else 0
        with kb.if_(head.ok, uniform=uniform) if head.ok is not None else nullcontext():
            base = kb.add(head.lds_off, op.lds_base)
            for i in range(op.width):
                col = [kb.extract(v, i) if op.width > 1 else v for v in vecs]
                val = kb.vec(*col) if d > 1 else col[0]
                kb.store(kb.gep(lds, kb.add(base, i * row) if i else base), val,
                         align=d * op.ctx.eb)


# ---- async: global -> LDS copies (gfx1250, sm_90) ------------------------------------------

def async_chunk_predicate(kb: KernelBuilder, valid: Value | None, byte_off: Value,
                          num_bytes: Value) -> Value:
    """``valid AND byte_off < num_bytes`` compared UNSIGNED, as a buffer resource checks it.

    The async copy has no hardware range check; a signed compare would let an offset of
    0x80000000 (negative as i32) through and copy from outside the buffer (upstream's bug).
    """
    in_range = kb.icmp("ult", byte_off, num_bytes)
    return in_range if valid is None else kb.and_(valid, in_range)


def copy_or_zero_fill(kb: KernelBuilder, buf: Value, byte_off: Value, num_bytes: Value,
                      lds: Value, slot: Value, stage: Value, spare: Value | int, nbytes: int,
                      valid: Value | None = None, zero_fill: bool = False,
                      inside: bool = False) -> None:
    """One chunk, branch-free: an async copy of ``nbytes`` and an LDS store of zeros of the
    tile's element type (``lds.elem``), both unpredicated; selects pick where each goes.

    ``slot``: the chunk's element index within a stage; ``stage`` and ``spare``: element
    offsets of the stage it belongs in and of the scratch stage, where each chunk's slot is
    this thread's own and is never read. In range, the copy reads the chunk into the stage
    and the zeros go to the scratch slot; out of range, the copy reads the buffer's first
    ``nbytes`` (in bounds: ``serves`` makes every buffer at least one chunk) into the
    scratch slot and the zeros go to the stage. The scratch slot's previous copy was
    retired by the wait that began the phase, so nothing lands there behind a store.

    ``zero_fill`` (``Target.async_zero_fill``, NVIDIA's cp.async): one copy into the stage
    that lands zeros itself where out of range and reads nothing there (src-size 0): no
    store, no scratch slot, no select on the source (an out-of-range address is never
    dereferenced).

    ``inside``: the chunk is known to lie inside the buffer and to be valid (A in a whole
    tile, ``whole_tiles_inside``): one copy into the stage, nothing else."""
    pred = None if inside else async_chunk_predicate(kb, valid, byte_off, num_bytes)
    if inside or zero_fill:  # straight into the stage
        src = kb.gep(kb.ptr_cast(buf, i8), byte_off)
        dst = kb.gep(lds, kb.add(slot, stage))
        if zero_fill:
            kb.async_copy_zfill(src, dst, nbytes, kb.const(1, i1) if inside else pred)
        else:
            kb.async_copy(src, dst, nbytes)
        return
    elem = lds.dtype.elem
    n = nbytes // elem.itemsize
    zero = kb.const(0.0, elem.vec(n) if n > 1 else elem)
    kb.store(kb.gep(lds, kb.add(slot, kb.select(pred, spare, stage))), zero, align=nbytes)
    src = kb.gep(kb.ptr_cast(buf, i8), kb.select(pred, byte_off, 0))
    kb.async_copy(src, kb.gep(lds, kb.add(slot, kb.select(pred, stage, spare))), nbytes)


def issue_async(op: OperandLoad, kt: Value, lds: Value, stage_off: Value,
                spare_off: int, state: list[tuple[Value, Value, Value]] | None = None,
                whole: bool = False) -> None:
    """Copy K tile ``kt`` of the operand into the LDS stage at element ``stage_off``;
    ``spare_off``: element offset of the scratch stage (``spec.lds_bytes_for``), where
    out-of-range chunks' copies land, each at its own slot's position. A ragged last slot
    (threads past the tile's chunks) is one ``if`` around its chunk: wave-uniform where the
    tile's chunk count is a multiple of the wave (no geometry of the walk has one).
    ``whole``: a tile of ``whole_tiles_inside`` (``OperandLoad.at``): A's chunks are plain
    copies, B's keep their pixel bound and the range check."""
    kb, eb = op.ctx.kb, op.ctx.eb
    shift = eb.bit_length() - 1
    wave = op.ctx.lay.wave_size
    zero_fill = get_target(op.ctx.spec.target).async_zero_fill
    for slot, (valid, off) in zip(op.slots, op.at(kt, state, whole), strict=True):
        guard = nullcontext() if slot.ok is None else \
            kb.if_(slot.ok, uniform=wave if slot.ok_uniform else 0)
        with guard:
            copy_or_zero_fill(kb, op.buf, kb.shl(off, shift), op.nbytes, lds,
                              kb.add(slot.lds_off, op.lds_base), stage_off, spare_off,
                              op.width * eb, valid=valid, zero_fill=zero_fill,
                              inside=whole and op.name == "dy")


def whole_tiles_inside(ctx: WgradContext) -> Value:
    """Workgroup-uniform: every A chunk of a tile wholly inside the slice lies inside dY,
    so ``issue_async(whole=True)`` may copy A without a range check. Such a chunk reads
    row k < k_end <= wg_K at columns group·kpg .. + kpg (``off_whole``), inside dY when
    wg_K·K·eb <= dy_bytes, groups·kpg <= K and group < groups: checked once per kernel, in
    64 bits on the zero-extended arguments (a negative or oversized one fails the check;
    the loop then takes the checked path for every tile)."""
    kb, a = ctx.kb, ctx.a

    def u64(v: Value) -> Value:
        return kb.zext(v, i64)
    rows_bytes = kb.mul(kb.mul(u64(a["wg_K"]), u64(a["K"])), kb.const(ctx.eb, i64))
    return all_of(kb, kb.icmp("ule", rows_bytes, u64(a["dy_bytes"])),
                  kb.icmp("ule", kb.mul(u64(a["groups"]), u64(a["kpg"])), u64(a["K"])),
                  kb.icmp("ult", ctx.group, a["groups"]))
