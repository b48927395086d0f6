"""Slot layout: which vectors of an operand's K tile each thread moves, and where they land
in LDS. The operands (``operand_a``, ``operand_b``) and the copies (``copies``) take it as
given.

Slots: a tile of ``rows × cols`` elements is cut into vectors of ``width`` along the row;
vector ``idx = slot·block + tid`` covers row idx // (cols/width). Adjacent threads take
adjacent vectors of one row, so a wave's accesses are contiguous in global memory.

The sync loop's LDS tile is K-contiguous (``context``): there a thread's slots come in
groups of ``depth`` k rows at the same columns (``kc_tile_slots``; B's groups share their
rows across the thread's columns, ``kc_row_tile_slots``), and ``copies.store_sync``
transposes each group in registers, ``width`` vectors of ``depth`` k values, one store
each (128 bits at depth 8). The depth is the largest of 8, 4, 2, 1 that still gives every
thread a group (``transpose_depth``): fewer, deeper groups would leave threads idle and
serialise the global loads on the rest. The k rows of a group follow ``mma.lds_k_order``,
so its values land contiguous at positions p0 .. p0 + depth.

B's slots may instead sit in few k rows a thread (``row_tile_slots``,
``kc_row_tile_slots``), so that one gather state per row is carried (``operand_b``).
"""

from __future__ import annotations

from dataclasses import dataclass

from wgradcache.kernel import mma
from wgradcache.kernel.builder import KernelBuilder
from wgradcache.kernel.ir import Value
from wgradcache.wgrad.context import WgradContext, udiv_const, urem_const

__all__ = ["Slot", "tile_slots", "row_tile_slots", "kc_tile_slots", "kc_row_tile_slots",
           "transpose_depth", "operand_slots", "per_column", "ROW_SEGMENT_BYTES"]


# the shortest run of adjacent threads' vectors in one row that row_tile_slots may give:
# one 32-byte memory sector, so the bytes a wave fetches stay those of the plain layout
ROW_SEGMENT_BYTES = 32


@dataclass(frozen=True)
class Slot:
    """One vector a thread moves per K tile: its tile row, first column, LDS element offset
    (within the operand tile) and whether this thread has it at all (None: always)."""

    k_row: Value
    col: Value
    lds_off: Value
    ok: Value | None
    ok_uniform: bool = False  # ``ok`` is equal over each wave (the boundary is wave-aligned)
    ok_sign: Value | None = None  # total - 1 - idx: negative exactly where ``ok`` is false


def tile_slots(ctx: WgradContext, cols: int, width: int, lds_row: int) -> list[Slot]:
    """Slots of a K-outer tile of tile_k rows of ``cols`` elements, in vectors of
    ``width`` (module docstring); ``lds_row``: the LDS row's element stride."""
    kb, tid, block, rows = ctx.kb, ctx.tid, ctx.spec.block_size, ctx.spec.tile_k
    wave = ctx.lay.wave_size
    per_row = cols // width
    total = rows * per_row
    # idx = s·block + tid: with total and block multiples of the wave, idx < total holds for
    # a whole wave or for none of it
    uniform = total % wave == 0 and block % wave == 0
    out = []
    row0, col0 = _row_col(kb, tid, per_row, width)
    for s in range(-(-total // block)):
        idx = kb.add(tid, s * block) if s else tid
        ok = kb.icmp("ult", idx, total) if (s + 1) * block > total else None
        sign = kb.sub(total - 1, idx) if ok is not None else None
        k_row, col = _row_col(kb, idx, per_row, width, s * block, row0, col0)
        lds_off = kb.add(kb.mul(k_row, lds_row), col)
        out.append(Slot(k_row, col, lds_off, ok, uniform, sign))
    return out


def _row_col(kb: KernelBuilder, idx: Value, per_row: int, width: int, shift: int = 0,  # noqa: PLR0913 - emits a slot's (row, col) IR, reusing tid's row0/col0 values
             row0: Value | None = None, col0: Value | None = None) -> tuple[Value, Value]:
    """(idx // per_row, (idx % per_row)·width) of vector ``idx`` = tid + ``shift``. Where
    ``shift`` is a multiple of per_row, from tid's (``row0``, ``col0``): the same column and
    the row ``shift / per_row`` further, so the slots' LDS addresses differ by constants
    (one base register and immediate offsets, not an address per slot: LLVM does not
    rewrite (tid + c) / n itself)."""
    if row0 is not None and shift % per_row == 0:
        return (kb.add(row0, shift // per_row) if shift else row0), col0
    col = urem_const(kb, idx, per_row)
    return udiv_const(kb, idx, per_row), (kb.mul(col, width) if width > 1 else col)


def row_tile_slots(ctx: WgradContext, cols: int, width: int, lds_row: int, max_rows: int
                   ) -> tuple[list[Slot], tuple[int, ...]] | None:
    """Slots of a K-outer tile in which a thread's slots sit in few k rows, each row's
    slots sharing one ``k_row`` value (one carried gather state per row:
    ``XOperand.row_state``), and the row of each slot; None where the shape does not
    allow it or a thread would get more than ``max_rows`` rows.

    T threads share a row, the fewest that still give runs of ``ROW_SEGMENT_BYTES``:
    thread ``tid`` takes rows tid // T + p·(block / T) at vectors tid % T + j·T, so for
    each slot adjacent threads take adjacent vectors of one row (runs of T vectors), and
    the bytes a wave fetches are those of ``tile_slots``' layout, sector for sector."""
    kb, tid, block, rows = ctx.kb, ctx.tid, ctx.spec.block_size, ctx.spec.tile_k
    eb = ctx.eb
    per_row = cols // width
    t = max(-(-block // rows), -(-ROW_SEGMENT_BYTES // (width * eb)))
    if per_row % t or block % t or (rows * t) % block or rows * t // block > max_rows:
        return None
    step = block // t  # rows per pass of the block
    k0 = udiv_const(kb, tid, t)
    lane = urem_const(kb, tid, t)
    out, row_of = [], []
    for p in range(rows * t // block):
        k_row = kb.add(k0, p * step) if p else k0
        base = kb.mul(k_row, lds_row)
        for j in range(per_row // t):
            v = kb.add(lane, j * t) if j else lane
            col = kb.mul(v, width) if width > 1 else v
            out.append(Slot(k_row, col, kb.add(base, col), None))
            row_of.append(p)
    return out, tuple(row_of)


def transpose_depth(rows: int, cols: int, width: int, block: int, k_step: int) -> int:
    """k rows per thread group of the K-contiguous tile (module docstring)."""
    vectors = rows * (cols // width)
    depth = 8
    while depth > 1 and (k_step % depth or vectors // depth < block):
        depth //= 2
    return depth


def _kc_groups(lay: mma.MmaLayout, depth: int) -> tuple[tuple[int, ...], list[int]]:
    """(k offsets of a group's ``depth`` slots from its first, the first k of each group)
    for ``mma.lds_k_order``: one offset table serves every group only where ``depth``
    divides every run of the order; ValueError where it splits one."""
    order = mma.lds_k_order(lay)
    steps = {tuple(order[r + j] - order[r] for j in range(depth))
             for r in range(0, lay.k, depth)}
    if len(steps) != 1:
        raise ValueError(f"depth {depth} splits a k run of the {lay.form} LDS order {order}")
    (offsets,) = steps
    return offsets, [order[r] for r in range(0, lay.k, depth)]


def _group_k(kb: KernelBuilder, p0: Value, lay: mma.MmaLayout, depth: int,
             heads: list[int]) -> Value:
    """The k of LDS position ``p0`` (a group's first): p0 itself where the order keeps
    groups in place, else p0's block of lay.k plus a select over the groups' heads."""
    if heads == list(range(0, lay.k, depth)):
        return p0
    r = urem_const(kb, p0, lay.k)
    head = kb.const(heads[0], r.dtype)
    for i, h in enumerate(heads[1:], 1):
        head = kb.select(kb.icmp("eq", r, i * depth), h, head)
    return kb.add(kb.sub(p0, r), head)


def kc_tile_slots(ctx: WgradContext, cols: int, width: int, depth: int) -> list[Slot]:
    """Slots of a K-contiguous tile: groups of ``depth`` consecutive slots share a column
    and LDS position p0 (``lds_off`` = col·row_k + p0, the group's first element); slot j
    of a group holds the k at position p0 + j of ``mma.lds_k_order``.

    Group ``idx = s·block + tid`` covers positions [p0, p0 + depth) with p0 = depth ·
    (idx // (cols/width)); adjacent threads take adjacent columns at the same positions,
    so each of a group's ``depth`` loads is contiguous across a wave, as in ``tile_slots``.
    Since depth divides every run of the order (checked), k(p0 + j) = k(p0) + j' for one
    offset table j', and k(p0) is a loop-invariant select over lay.k / depth values.
    """
    kb, tid, block, rows = ctx.kb, ctx.tid, ctx.spec.block_size, ctx.spec.tile_k
    lay, row_k = ctx.lay, ctx.row_k
    offsets, heads = _kc_groups(lay, depth)
    per_row = cols // width
    total = (rows // depth) * per_row
    out = []
    row0, col0 = _row_col(kb, tid, per_row, width)
    for s in range(-(-total // block)):
        idx = kb.add(tid, s * block) if s else tid
        ok = kb.icmp("ult", idx, total) if (s + 1) * block > total else None
        sign = kb.sub(total - 1, idx) if ok is not None else None
        group, col = _row_col(kb, idx, per_row, width, s * block, row0, col0)
        p0 = kb.mul(group, depth)
        k0 = _group_k(kb, p0, lay, depth, heads)
        lds_off = kb.add(kb.mul(col, row_k), p0)
        # idx = s·block + tid: with total and block multiples of the wave, idx < total
        # holds for a whole wave or for none of it
        uniform = total % lay.wave_size == 0 and block % lay.wave_size == 0
        out += [Slot(kb.add(k0, off) if off else k0, col, lds_off, ok, uniform, sign)
                for off in offsets]
    return out


def kc_row_tile_slots(ctx: WgradContext, cols: int, width: int, depth: int, max_rows: int
                      ) -> tuple[list[Slot], tuple[int, ...], tuple[int, ...]] | None:
    """``kc_tile_slots``' groups laid so that a thread's groups share their k rows: T
    threads take one position group, thread ``tid`` positions p0 = depth·(tid // T + p·block
    / T) at columns tid % T + j·T, so its slots sit in depth·passes k rows whatever the
    column count (one carried gather state per row: ``XOperand.row_state``); adjacent
    threads still take adjacent columns, in runs of at least ``ROW_SEGMENT_BYTES``. The
    slots come as ``kc_tile_slots`` gives them (groups of ``depth`` at one column, for
    ``store_sync``), with the row of each and, where the thread has more than
    ``max_rows`` rows, the k offsets of a group's rows from its first
    (``XOperand.derive``: only a group's first row is carried; else None). None where
    the shape does not allow it or a thread would get more than ``max_rows`` groups.

    Why: with one column a thread owns all of a column's k rows, so every slot has a row of
    its own and the gather divides per slot per tile (two magic divisions, ~25 VALU an
    element on narrow vectors); here a row's (wo, ho, offset) is carried and shared by the
    thread's columns."""
    kb, tid, block, rows = ctx.kb, ctx.tid, ctx.spec.block_size, ctx.spec.tile_k
    lay, row_k, eb = ctx.lay, ctx.row_k, ctx.eb
    if depth < 1:
        return None
    try:
        offsets, heads = _kc_groups(lay, depth)
    except ValueError:
        return None
    per_row, groups = cols // width, rows // depth
    t = max(-(-block // groups), -(-ROW_SEGMENT_BYTES // (width * eb)))
    if per_row % t or block % t or (groups * t) % block or groups * t // block > max_rows:
        return None
    step = block // t
    g0, lane = udiv_const(kb, tid, t), urem_const(kb, tid, t)
    out, row_of = [], []
    for p in range(groups * t // block):
        p0 = kb.mul(kb.add(g0, p * step) if p else g0, depth)
        k0 = _group_k(kb, p0, lay, depth, heads)
        k_rows = [kb.add(k0, off) if off else k0 for off in offsets]
        for j in range(per_row // t):
            v = kb.add(lane, j * t) if j else lane
            col = kb.mul(v, width) if width > 1 else v
            lds_off = kb.add(kb.mul(col, row_k), p0)
            out += [Slot(k, col, lds_off, None) for k in k_rows]
            row_of += [p * depth + i for i in range(depth)]
    # carrying every row is measured cheaper (gfx1250 main loop, 32x32x32 v1x1: 803
    # instructions against 859 derived; 128x128x64 v1x1: 761 against 767); derive only past
    # max_rows (32x32x64 v1x1: 1622 against 2110 dividing per tile)
    return out, tuple(row_of), (offsets if len(set(row_of)) > max_rows else None)


def operand_slots(ctx: WgradContext, cols: int, width: int, row: int) -> tuple[list[Slot], int]:
    """The operand's slots in the context's LDS layout, and the transpose depth (0: none)."""
    sp = ctx.spec
    if not ctx.k_contiguous:
        return tile_slots(ctx, cols, width, row), 0
    depth = transpose_depth(sp.tile_k, cols, width, sp.block_size, ctx.lay.k)
    return kc_tile_slots(ctx, cols, width, depth), depth


def per_column(slots: list[Slot], make) -> list[dict]:
    """``make(slot)`` once per distinct column: a transposed group's slots share theirs."""
    out: list[dict] = []
    for s in slots:
        out.append(out[-1] if out and slots[len(out) - 1].col is s.col else make(s))
    return out
