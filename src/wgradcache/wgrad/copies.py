"""The copy code: an operand's vectors of a K tile from global memory into its LDS tile,
sync (bounded loads into registers, then stores) or async (copies straight into LDS).

The copies take an operand (``operand.Operand``: ``operand_a.DyOperand``,
``operand_b.XOperand``) as given: its slots say where each vector lands, ``bounded`` and
``at`` where it is read from and whether it is valid; none asks which operand it is.

The sync loop's loads are bounded loads: an invalid vector reads zeros by the hardware's
range check, no exec-mask branch per vector. The async copies have no range check: their
predicate is explicit (``async_chunk_predicate``) and picks, by selects, where an
unpredicated copy and an unpredicated zero store land (``copy_or_zero_fill``): no exec-mask
branch either; on NVIDIA it is the copy's src-size (cp.async lands zeros itself).

On a K-contiguous LDS tile ``store_sync`` transposes each group of ``depth`` k rows in
registers (``slots`` says why the groups are laid so).
"""

from __future__ import annotations

from contextlib import nullcontext

from wgradcache.kernel.builder import KernelBuilder
from wgradcache.kernel.ir import Value, i1, i8
from wgradcache.model.targets import get_target
from wgradcache.wgrad.gather import Coords
from wgradcache.wgrad.operand import Operand

__all__ = ["load_sync", "store_sync", "issue_async", "async_chunk_predicate",
           "copy_or_zero_fill"]


# ---- sync: global -> registers -> LDS ------------------------------------------------------

def load_sync(op: Operand, kt: Value,
              state: list[Coords] | None = None) -> list[Value]:
    """The operand's vectors of K tile ``kt`` in registers (zeros where invalid): bounded
    loads, an invalid vector at a byte offset >= ``operand.INVALID_OFFSET`` (no branch, no
    compare: ``XOperand.byte_offsets``). A (dY) reads through a record that starts at the
    tile and ends at the slice (``DyOperand.record``): its offsets are loop-invariant, and
    the slice's row bound is the hardware's range check."""
    kb = op.ctx.kb
    align = op.width * op.ctx.eb
    return [kb.bounded_load(op.buf, off, num, op.width, align=align, base=start)
            for off, num, start in op.bounded(kt, state)]


def store_sync(op: Operand, regs: list[Value], lds: Value) -> None:
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


def copy_or_zero_fill(kb: KernelBuilder, buf: Value, byte_off: Value, num_bytes: Value,  # noqa: PLR0913 - emits one chunk's IR: each argument is a value or choice of that chunk's copy
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


def issue_async(op: Operand, kt: Value, lds: Value, stage_off: Value,  # noqa: PLR0913 - emits one K tile's copy IR: the tile, its LDS stage, the scratch stage
                spare_off: Value | int, state: list[Coords] | None = None,
                whole: bool = False) -> None:
    """Copy K tile ``kt`` of the operand into the LDS stage at element ``stage_off``;
    ``spare_off``: element offset of the scratch stage (``spec.lds_bytes_for``), where
    out-of-range chunks' copies land, each at its own slot's position. A ragged last slot
    (threads past the tile's chunks) is one ``if`` around its chunk: wave-uniform where the
    tile's chunk count is a multiple of the wave (no geometry of the walk has one).
    ``whole``: a tile of ``whole_tiles_inside`` (``Operand.at``): A's chunks are plain
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
                              inside=whole and op.whole_inside)
