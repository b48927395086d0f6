"""The K loops: MMA atoms read from LDS, the pipelined sync loop (two LDS stages wherever
they fit, ``spec.sync_stages``) and the async ping-pong (gfx1250, sm_90) or its deeper ring
(``spec.stages`` 3 and 4, ``_ring_k_loop``); one barrier per K tile.

Each wave owns a (tile_m/warp_m) × (tile_n/warp_n) sub-tile of 16×16 atoms and keeps one
``<c_elems x f32>`` accumulator per atom, carried through the loop. Fragments are gathered
with the lane maps of ``kernel/mma.py`` (the emulator scatters with the same maps).

Fragment reads, per loop:

* sync, AMD: K-contiguous LDS (CK's route, every WMMA/MFMA target): the loaders transpose once at
  LDS-write time, so a lane's fragment, a row of A or a column of B at ``ab_elems`` k
  values, is one contiguous run: one vector read, 128 bits per 16 bytes of fragment (2
  reads per gfx1250 / gfx11 fragment, 1 per gfx12 one). The lane maps fix which k each slot
  holds but the LDS row may hold its k values in any order, so each row stores them in
  ``mma.lds_k_order`` (lane group g's slots at positions g·ab_elems ...): the read needs
  no new instruction and no shuffle, on every target. The write pays instead, once per
  staged element (~0.5 v_perm per element), while each element is read warp_n (A) or
  warp_m (B) times; rows are tile_k + 8 elements, an odd multiple of 16 bytes at tile_k
  32 and 64, so the 8 lanes of one 128-bit read phase hit 8 distinct 4-bank groups.
* async (gfx1250; sm_90 through cp.async, read by ldmatrix .trans as its sync loop is):
  the copies land K-outer, as memory holds them, and a lane's k values are
  a column. ``ds_load_tr16_b128`` reads them at 128 bits: the 8 lanes of a group address 8
  consecutive k rows at 8 consecutive m (16 bytes each) and each lane receives its m's 8 k
  values, one run of the gfx1250 k-map (k = 16*(i//8) + 8*g + i%8): two reads per
  fragment, as on the K-contiguous tile, with no transpose at LDS-write time (the async
  copy cannot do one). The lane map of that instruction has secondary sources only
  (``mma.TRANSPOSED_READS``); targets without it read each element at 16 bits.
* sync, sm_90 (``Target.sync_k_outer``): K-outer LDS as in the async loop, each loaded
  vector stored as it came (a 16-byte row segment, adjacent lanes adjacent segments: no
  bank conflict), fragments read by ``ldmatrix.x4.trans``, one per 16x16 fragment (B's
  lane l addresses k row 8·((l >> 3) & 1) + l % 8 at columns 8·(l >> 4) ..; A's swaps the
  two bits, so its four registers land in the order HMMA takes its A quad: no move per
  fragment, ``mma.TransposedRead.a_bits``; rows of tile_mn + 8 elements, an odd multiple
  of 16 bytes, so each 8x8 matrix's 8 rows hit 8 distinct 4-bank groups). Why not the
  K-contiguous route there: its register transpose stores each
  lane's k run into rows ``width`` apart, a multiple of 128 bytes across a warp, and on the
  H200 those stores took 24 wavefronts each (Nsight Compute on l3.conv2: 10.9 M store
  wavefronts against 2.7 M for the reads; benchmarks/README.md); and the K-outer stage is
  smaller (no per-row k pad), so 128x128x32 gets two stages in the 48 KB.
* sync, gfx1250 with loads of 4 or 8 elements on both operands
  (``Target.sync_k_outer_min_vec``): the same K-outer route through ``ds_load_tr16_b128``
  (two reads per fragment). Measured (isa_quality, benchmarks/README.md): the 128x128x64
  v8x8 kernels go from 13.8-15.8x to 11.2x llvm-mca's WMMA bound, the wide median from
  23.4 to 22.3 instructions per MMA; v4x4 from 23-58 to 16-45 (a 64-bit store per vector
  instead of ~0.5 v_perm per element and the group bookkeeping). With 1-element vectors
  the K-outer store is a 16-bit store per element where the register transpose packs 8 k
  values into one 128-bit store (128x128x64 v1x1: 129.8x against 47.9x; v8x1 and v1x1
  instruction counts within 10 % either way), so those, and gfx11/gfx12 (no transposing
  read), keep CK's route.
"""

from __future__ import annotations

from contextlib import nullcontext

from wgradcache.kernel import mma
from wgradcache.kernel.ir import Value, f32, i32
from wgradcache.model.spec import (
    LoadWidths,
    Tile,
    loads_per_thread,
    ring_wait_depth,
    sync_stages,
)
from wgradcache.model.targets import get_target
from wgradcache.wgrad.context import WgradContext, udiv_const
from wgradcache.wgrad.copies import issue_async, load_sync, store_sync
from wgradcache.wgrad.operand_a import a_operand, whole_tiles_inside
from wgradcache.wgrad.operand_b import b_operand

__all__ = ["atoms", "zero_accumulators", "mma_tile", "sync_k_loop", "async_k_loop",
           "PREFETCH_MAX_LOADS", "GATHER_STATE_MAX_SLOTS", "RING_PLANTS"]

# Global loads per thread per K tile up to which the sync loop prefetches the next tile into
# registers (sync_k_loop). Measured with LLVM 22 (no spill at or below; see sync_k_loop):
PREFETCH_MAX_LOADS = 32
# B slots per thread up to which the sync loop carries each slot's gather coordinates
# (three registers a slot) instead of dividing per K tile (sync_k_loop)
GATHER_STATE_MAX_SLOTS = 16
# The hazards ``async_k_loop`` plants for the tests of its ring (never in a cached kernel):
# "wait", wait for one tile of copies fewer; "ring", issue tile t+S-1 into tile t's stage.
RING_PLANTS = ("wait", "ring")


def atoms(ctx: WgradContext) -> tuple[int, int]:
    """Atoms per wave along M and N."""
    return ctx.sub_m // ctx.lay.m, ctx.sub_n // ctx.lay.n


def zero_accumulators(ctx: WgradContext) -> list[Value]:
    am, an = atoms(ctx)
    return [ctx.kb.const(0.0, f32.vec(ctx.lay.c_elems))] * (am * an)


def _lane_bases(ctx: WgradContext) -> tuple[Value, Value]:
    """Per-lane element index of slot 0 of atom (0, 0) at k = 0, in the A and B tiles."""
    kb, lay = ctx.kb, ctx.lay
    a = kb.add(kb.mul(ctx.wave_m, ctx.sub_m), ctx.lane_mn)
    b = kb.add(kb.mul(ctx.wave_n, ctx.sub_n), ctx.lane_mn)
    if ctx.k_contiguous:
        a, b = kb.mul(a, ctx.row_k), kb.mul(b, ctx.row_k)
        if lay.k_group_stride:  # lane group g reads positions g·run (lds_k_order)
            a = kb.add(a, kb.mul(ctx.lane_grp, lay.run))
            b = kb.add(b, kb.mul(ctx.lane_grp, lay.run))
    elif lay.k_group_stride:
        a = kb.add(a, kb.mul(ctx.lane_grp, lay.k_group_stride * ctx.row_a))
        b = kb.add(b, kb.mul(ctx.lane_grp, lay.k_group_stride * ctx.row_b))
    return a, kb.add(b, ctx.b_offset)


def _tr_read(ctx: WgradContext) -> mma.TransposedRead | None:
    """The transposing read that feeds this kernel's K-outer fragments: the target's
    (``Target.lds_read_tr``) where it reads this atom form's 16-bit fragments; else None."""
    name = get_target(ctx.spec.target).lds_read_tr
    if ctx.k_contiguous or not name or ctx.eb != 2:
        return None
    read = mma.transposed_read(name)
    return read if read.form == ctx.lay.form else None


def _tr_lane_bases(ctx: WgradContext, read: mma.TransposedRead) -> tuple[Value, Value]:
    """Per-lane element index, in the K-outer A and B tiles, of the row this lane addresses
    for atom (0, 0), k-step 0, read 0 (``TransposedRead.addressed``): k row
    8·((l >> row_bit) & 1) + l % 8 at columns 8·((l >> col_bit) & 1) .. + 7 of the wave's
    sub-tile (gfx1250: row bit 4, the lane group; ldmatrix: row bit 3, column bit 4 for B,
    the other way round for A). Each distinct (row_bit, col_bit) is computed once, so a
    target whose A and B agree emits the IR it did before A could differ."""
    kb = ctx.kb

    def addressed(row_bit: int, col_bit: int) -> tuple[Value, Value]:
        return (kb.add(kb.mul(kb.and_(kb.lshr(ctx.lane, row_bit), 1), 8), kb.and_(ctx.lane, 7)),
                kb.mul(kb.and_(kb.lshr(ctx.lane, col_bit), 1), 8))

    b_row, b_col = addressed(*read.bits("b"))
    a_row, a_col = (b_row, b_col) if read.bits("a") == read.bits("b") \
        else addressed(*read.bits("a"))  # A's may differ (TransposedRead.a_bits)
    a = kb.add(kb.mul(a_row, ctx.row_a), kb.add(kb.mul(ctx.wave_m, ctx.sub_m), a_col))
    b = kb.add(kb.mul(b_row, ctx.row_b), kb.add(kb.mul(ctx.wave_n, ctx.sub_n), b_col))
    return a, kb.add(b, ctx.b_offset)


def lane_bases(ctx: WgradContext) -> tuple[Value, Value]:
    """The lane's fragment-read base in the A and B tiles, for the loop's layout."""
    read = _tr_read(ctx)
    return _tr_lane_bases(ctx, read) if read is not None else _lane_bases(ctx)


def _fragment_align(ctx: WgradContext) -> int:
    """The alignment every K-contiguous fragment read has: the largest power of two, up
    to 16, dividing the byte size of the run and of every term of its address."""
    lay, eb = ctx.lay, ctx.eb
    terms = [lay.run * eb, ctx.row_k * eb, lay.k * eb, ctx.b_offset * eb]
    if lay.k_group_stride:
        terms.append(lay.run * eb)
    align = 16
    while any(t % align for t in terms):
        align //= 2
    return align


def mma_tile(ctx: WgradContext, a_base: Value, b_base: Value, accs: list[Value]) -> list[Value]:
    """One K tile of MMAs from LDS; ``a_base``/``b_base`` point at the lane's slot 0."""
    kb, lay, sp = ctx.kb, ctx.lay, ctx.spec
    am, an = atoms(ctx)
    accs = list(accs)
    align = _fragment_align(ctx) if ctx.k_contiguous else 0
    tr = _tr_read(ctx)
    for ks in range(sp.tile_k // lay.k):
        def frag(base: Value, row: int, first: int, operand: str, ks: int = ks) -> Value:
            # one run of ``lay.run`` k values (lds_k_order) per row block of the fragment;
            # ``first``: the atom's first row (A) or column (B) in the wave's sub-tile
            if ctx.k_contiguous:
                runs = [kb.load(kb.gep(base, (first + r) * ctx.row_k + ks * lay.k), lay.run,
                                align=align) for r in lay.row_offsets]
                return runs[0] if len(runs) == 1 else kb.concat(*runs)
            if tr is not None:  # base: _tr_lane_bases; one read per k offset of tr
                reads = [kb.lds_load_tr(kb.gep(base, (ks * lay.k + j) * row + first), tr.name)
                         for j in tr.k_reads]
                got = reads[0] if len(reads) == 1 else kb.concat(*reads)
                order = tr.slots(operand)  # the IR's slot order where the read's differs
                return kb.shuffle(got, got, order) if order else got
            return kb.vec(*(kb.load(kb.gep(base, (ks * lay.k + k) * row + first + r))
                            for r in lay.row_offsets for k in lay.k_offsets))
        a_frags = [frag(a_base, ctx.row_a, i * lay.m, "a") for i in range(am)]
        b_frags = [frag(b_base, ctx.row_b, j * lay.n, "b") for j in range(an)]
        for i in range(am):
            for j in range(an):
                accs[i * an + j] = kb.mma(lay.form, a_frags[i], b_frags[j], accs[i * an + j])
    return accs


def sync_k_loop(ctx: WgradContext, planted_race: bool = False) -> list[Value]:
    """The pipelined sync loop: two LDS stages, one barrier per K tile.

    Before the loop the thread loads tile k_begin into registers. Iteration t stores those
    registers (tile t) into stage t mod 2, waits at the one barrier, issues the global loads
    of tile t+1 into registers (loop-carried), then runs tile t's MMAs from stage t mod 2:
    the loads are in flight while the MMAs run. Tile t+1 goes into the other stage, so no
    wave can overwrite what a slower wave still reads: to store into stage t mod 2 again
    (iteration t+2) a wave must pass barrier t+1, which every wave reaches only after its
    MMAs of tile t. Past k_end every load is out of range (bounded loads read zeros), so
    the last iteration's prefetch needs no branch.

    Why two LDS stages and not a register double buffer with one stage: one stage needs two
    barriers per tile (the store of t+1 must wait until every wave has read t), and the
    registers already hold one tile in flight either way. The second stage costs LDS, not
    registers: at most 2 x 20 KiB on gfx1201/gfx1151 (tile_k 32: max_k_steps 2 of the
    16x16x16 atom) of their 64 KiB, 72 KiB of gfx1250's 320 KiB (128x128x64 fp16), so the
    geometries.yaml ladder keeps every geometry it kept with one stage (``lds_fits``).
    Where two stages do not fit (gfx942's 256-wide tiles, ``spec.sync_stages``) the loop
    keeps one and a second barrier after the MMAs; the prefetch stays.

    Register prefetch only up to ``PREFETCH_MAX_LOADS`` global loads per thread per tile:
    the prefetched tile is live across the MMAs, and with the most loads the ladder admits
    it spilled (measured below). Above it each iteration loads its own tile before the
    store; the two stages still need only the one barrier, and other waves' MMAs still
    overlap this wave's loads.

    A's loads read through a record that moves with the K tile (``DyOperand.record``:
    start at row kt, end at the slice's end): the row bound is the hardware's range check
    and A's per-lane offsets are fixed for the loop, so A costs no VALU per tile (measured:
    gfx1250 VALU per MMA over the isa_quality subset, median 25.5 -> 20.8 with the B
    changes below; the resource is a few SALU a tile).

    The B gather's k rows map to (img, ho, wo) through two magic divisions. The loop
    divides once before it and carries the (wo, ho, offset) of each k row of the thread,
    stepped a tile on by adds and one conditional wrap per coordinate
    (``XOperand.advance``); a vector adds its column's tap. The B slots are laid so a
    thread's vectors share few k rows: on a K-outer tile as the async loop lays its chunks
    (``slots.row_tile_slots``), on a K-contiguous one in groups of ``depth`` rows shared
    by the thread's columns (``slots.kc_row_tile_slots``; before, a thread owned one
    column and every slot had a row of its own, so narrow kernels divided per slot per
    tile: gfx1250 t128x128x64 v1x1 1204 -> 697 main-loop instructions). Up to
    ``GATHER_STATE_MAX_SLOTS`` rows are carried; past it only each group's first row is,
    the others are stepped from it every tile (``XOperand.derive``: t32x32x64 v1x1 2110
    -> 1478). No kernel of any target's walk divides per tile now; the per-tile division
    stays for shapes neither layout takes (tested by forcing it).
    Measured with isa_quality: 16 is better than 8 over the subset.

    ``planted_race``: one stage and the single barrier, the unsafe form whose race (tile
    t+1 stored while other waves still read tile t) the emulator reports; tests only.
    """
    kb, sp = ctx.kb, ctx.spec
    target = get_target(sp.target)
    tile = Tile(target, sp.dtype, sp.geometry)
    stages = 1 if planted_race else sync_stages(tile, not ctx.k_contiguous)
    prefetch = loads_per_thread(tile, LoadWidths("sync", sp.vec_a, sp.vec_b)
                                ) <= PREFETCH_MAX_LOADS
    lds = ctx.lds_ab()
    a_op = a_operand(ctx, sp.vec_a)
    b_op = b_operand(ctx, sp.vec_b, max_rows=GATHER_STATE_MAX_SLOTS)
    a_lane, b_lane = lane_bases(ctx)
    accs0 = zero_accumulators(ctx)
    # the B gather's (wo, ho, offset) per slot, or per k row (row_tile_slots), carried and
    # advanced without a division
    if b_op.row_of is not None:
        gather, state0 = True, b_op.row_state(ctx.k_begin)
    else:
        gather = len(b_op.slots) <= GATHER_STATE_MAX_SLOTS
        state0 = b_op.gather_state(ctx.k_begin) if gather else []
    flat0 = [v for st in state0 for v in st]
    regs0 = [*load_sync(a_op, ctx.k_begin), *load_sync(b_op, ctx.k_begin, state0 or None)] \
        if prefetch else []
    n_acc, n_a, n_r = len(accs0), len(a_op.slots), len(regs0)
    zero = kb.const(0, i32)
    with kb.for_(ctx.k_begin, ctx.k_end, sp.tile_k,
                 carried=[*accs0, *regs0, *flat0, zero]) as loop:
        kt, c = loop.index, list(loop.carried)
        accs, cur = c[:n_acc], c[-1]
        flat = c[n_acc + n_r:-1]
        state = [tuple(flat[i:i + 3]) for i in range(0, len(flat), 3)] if gather else None
        regs = c[n_acc:n_acc + n_r] if prefetch else \
            [*load_sync(a_op, kt), *load_sync(b_op, kt, state)]
        stage = kb.gep(lds, cur)
        store_sync(a_op, regs[:n_a], stage)
        store_sync(b_op, regs[n_a:], stage)
        kb.barrier()
        nxt_regs = []
        nxt_state = b_op.advance(state) if gather else None
        if prefetch:
            k_next = kb.add(kt, sp.tile_k)
            nxt_regs = [*load_sync(a_op, k_next), *load_sync(b_op, k_next, nxt_state)]
        accs = mma_tile(ctx, kb.gep(stage, a_lane), kb.gep(stage, b_lane), accs)
        if stages == 1 and not planted_race:
            kb.barrier()  # one stage: every wave done reading before the next stores
        nxt = kb.sub(ctx.stage_elems, cur) if stages == 2 else cur
        loop.yield_(*accs, *nxt_regs, *(v for st in nxt_state or () for v in st), nxt)
    return list(loop.results[:n_acc])


def async_k_loop(ctx: WgradContext, plant: str = "") -> list[Value]:
    """One-barrier ping-pong over async copies into two LDS stages (``spec.stages`` 2; a
    deeper ring is ``_ring_k_loop``; ``plant``: ``RING_PLANTS``, tests only).

    Phase t: wait for this wave's copies of tile t, one barrier (every wave's copies of t
    have landed and every wave is done reading tile t−1's stage), then issue tile t+1 into
    the other stage while tile t's MMAs run.

    No exec-mask branch per chunk: every chunk issues one unpredicated copy and one zero
    store, a select putting each in its stage or at the same slot of a third, scratch
    stage that nothing reads (``copies.copy_or_zero_fill``); on sm_90 one cp.async whose
    src-size zero-fills an out-of-range chunk, and no third stage.

    The wait is for all of the wave's (gfx1250) or the thread's (cp.async) copies; every
    lane waits, so the two completion scopes give the same program order, and the barrier
    after it publishes every lane's landed bytes to the workgroup. The phase's ``if`` (is there
    a tile t+1) is wave-uniform: one scalar branch.

    No division per tile in B's gather where ``slots.row_tile_slots`` lays the thread's
    B chunks in at most ``GATHER_STATE_MAX_SLOTS`` k rows: one (wo, ho, offset) per row is
    carried and stepped by ``XOperand.advance`` (as in ``sync_k_loop``), and a chunk
    pays only its tap's two bounds and one add. Elsewhere each chunk divides per tile.
    """
    if ctx.spec.stages > 2 or plant:
        return _ring_k_loop(ctx, plant)
    kb, sp = ctx.kb, ctx.spec
    lds = ctx.lds_ab()
    a_op = a_operand(ctx, sp.chunk_a // ctx.eb)
    b_op = b_operand(ctx, sp.chunk_b // ctx.eb, max_rows=GATHER_STATE_MAX_SLOTS)
    a_lane, b_lane = lane_bases(ctx)
    zero = kb.const(0, a_lane.dtype)
    spare = 2 * ctx.stage_elems  # the scratch stage of out-of-range chunks' copies
    # one carried gather state per k row of the thread's B slots (slots.row_tile_slots)
    state0 = b_op.row_state(ctx.k_begin) if b_op.row_of else []
    with kb.if_(kb.icmp("slt", ctx.k_begin, ctx.k_end), uniform=ctx.lay.wave_size):
        issue_async(a_op, ctx.k_begin, lds, zero, spare)
        issue_async(b_op, ctx.k_begin, lds, zero, spare, state0 or None)
    accs0 = zero_accumulators(ctx)
    n_acc, n_state = len(accs0), sum(len(st) for st in state0)

    def phase(kt: Value, accs: list[Value], flat: list[Value], whole: bool
              ) -> tuple[list[Value], list[Value]]:
        state = [tuple(flat[i:i + 3]) for i in range(0, len(flat), 3)]
        nxt_state = b_op.advance(state) if flat else None
        parity = kb.and_(udiv_const(kb, kb.sub(kt, ctx.k_begin), sp.tile_k), 1)
        cur = kb.mul(parity, ctx.stage_elems)
        nxt = kb.sub(ctx.stage_elems, cur)
        kb.async_wait(0)
        kb.barrier()
        k_next = kb.add(kt, sp.tile_k)
        more = nullcontext() if whole else \
            kb.if_(kb.icmp("slt", k_next, ctx.k_end), uniform=ctx.lay.wave_size)
        with more:
            issue_async(a_op, k_next, lds, nxt, spare, whole=whole)
            issue_async(b_op, k_next, lds, nxt, spare, nxt_state, whole=whole)
        a_base = kb.gep(lds, kb.add(a_lane, cur))
        b_base = kb.gep(lds, kb.add(b_lane, cur))
        return mma_tile(ctx, a_base, b_base, accs), \
            [v for st in nxt_state or () for v in st]

    # the steady state: phases whose next tile is whole (k_next + tile_k <= k_end)
    whole_end = kb.select(whole_tiles_inside(ctx),
                          kb.sub(ctx.k_end, 2 * sp.tile_k - 1), ctx.k_begin)
    with kb.for_(ctx.k_begin, whole_end, sp.tile_k,
                 carried=[*accs0, *(v for st in state0 for v in st), ctx.k_begin]) as loop:
        kt, c = loop.index, list(loop.carried)
        accs, flat = phase(kt, c[:n_acc], c[n_acc:n_acc + n_state], whole=True)
        loop.yield_(*accs, *flat, kb.add(kt, sp.tile_k))
    res = list(loop.results)
    # the last one or two phases (every phase where whole_tiles_inside fails): checked
    with kb.for_(res[-1], ctx.k_end, sp.tile_k, carried=res[:-1]) as loop:
        kt, c = loop.index, list(loop.carried)
        accs, flat = phase(kt, c[:n_acc], c[n_acc:], whole=False)
        loop.yield_(*accs, *flat)
    return list(loop.results[:n_acc])


def _ring_k_loop(ctx: WgradContext, plant: str = "") -> list[Value]:
    """The async loop over a ring of S = ``spec.stages`` LDS stages, S - 1 K tiles of copies
    in flight, one barrier per K tile.

    Before the loop the thread issues tiles 0 .. S-2 into stages 0 .. S-2. Phase t: wait
    until this thread's (cp.async) or wave's (gfx1250) copies of tile t have landed, the
    S - 2 newer tiles' left in flight (``spec.ring_wait_depth``); one barrier; issue tile
    t+S-1 into stage (t-1) mod S; tile t's MMAs from stage t mod S.

    Why one barrier per tile is still enough: the stage tile t+S-1 overwrites is the one
    tile t-1 was read from, and every wave is past its MMAs of tile t-1 once it has passed
    barrier t, which no wave leaves before all have reached it; the stages of tiles t+1 ..
    t+S-2 are written only by their copies in flight and read by nobody before the wait and
    barrier of their own phase; tile t's stage is read after barrier t, which every lane
    reaches after its wait for tile t. With S = 2 this is the ping-pong.

    The wait: on NVIDIA every phase (and every prologue tile) commits one cp.async group,
    empty where no tile is left to issue, so tile t is group t and ``cp.async.wait_group
    S-2`` retires it in every phase (CUTLASS's multistage mainloop commits the same way).
    gfx1250 counts copy instructions (``ring_wait_depth``): exact in the steady phases,
    where the S - 2 newer tiles were all issued; a checked phase with fewer than S - 2
    tiles after it first waits for all (one scalar branch).

    gfx1250's out-of-range chunks copy into scratch and their in-range twins store zeros
    there (``copies.copy_or_zero_fill``): one scratch stage per tile in flight, tile j's
    at scratch j mod (S-1), so a scratch slot is written only after the wait that retired
    its last copy (tile t+S-1 takes tile t's, retired by this phase's wait)."""
    kb, sp = ctx.kb, ctx.spec
    target = get_target(sp.target)
    zero_fill = target.async_zero_fill
    S, stage, tk = sp.stages, ctx.stage_elems, sp.tile_k
    lds = ctx.lds_ab()
    a_op = a_operand(ctx, sp.chunk_a // ctx.eb)
    b_op = b_operand(ctx, sp.chunk_b // ctx.eb, max_rows=GATHER_STATE_MAX_SLOTS)
    a_lane, b_lane = lane_bases(ctx)
    idx = a_lane.dtype
    spare0 = S * stage  # the scratch stages (gfx1250): S - 1 after the ring
    uniform = ctx.lay.wave_size

    def const(v: int) -> Value:
        return kb.const(v, idx)

    def wrap(off: Value, first: int, n: int) -> Value:
        """The next stage offset of a ring of ``n`` stages starting at ``first``."""
        nxt = kb.add(off, stage)
        return kb.select(kb.icmp("eq", nxt, const(first + n * stage)), const(first), nxt)

    state = b_op.row_state(ctx.k_begin) if b_op.row_of else []
    for j in range(S - 1):  # the prologue: tiles 0 .. S-2
        kj = kb.add(ctx.k_begin, j * tk) if j else ctx.k_begin
        if j:
            state = b_op.advance(state) if state else state
        with kb.if_(kb.icmp("slt", kj, ctx.k_end), uniform=uniform):
            issue_async(a_op, kj, lds, const(j * stage), spare0 + j * stage)
            issue_async(b_op, kj, lds, const(j * stage), spare0 + j * stage, state or None)
        if zero_fill:
            kb.async_commit()
    accs0 = zero_accumulators(ctx)
    n_acc, n_state = len(accs0), sum(len(st) for st in state)
    depth = ring_wait_depth(sp, S - 1 if plant == "wait" else S - 2)  # planted: one tile more

    def phase(kt: Value, c: list[Value], whole: bool) -> list[Value]:
        accs, flat = c[:n_acc], c[n_acc:n_acc + n_state]
        cur, spare = c[n_acc + n_state], (None if zero_fill else c[n_acc + n_state + 1])
        last = [tuple(flat[i:i + 3]) for i in range(0, len(flat), 3)]
        nxt_state = b_op.advance(last) if flat else None
        if zero_fill:
            kb.async_wait_group(depth)
        else:
            if not whole:  # fewer than S - 2 tiles after this one: wait for all
                with kb.if_(kb.icmp("sge", kb.add(kt, (S - 2) * tk), ctx.k_end),
                            uniform=uniform):
                    kb.async_wait(0)
            kb.async_wait(depth)
        kb.barrier()
        # tile t+S-1 goes where tile t-1 was read: (t-1) mod S (planted: tile t's own)
        prev = kb.select(kb.icmp("eq", cur, const(0)), const((S - 1) * stage),
                         kb.sub(cur, stage))
        nxt = cur if plant == "ring" else prev
        k_next = kb.add(kt, (S - 1) * tk)
        more = nullcontext() if whole else \
            kb.if_(kb.icmp("slt", k_next, ctx.k_end), uniform=uniform)
        with more:
            scratch = 0 if zero_fill else spare
            issue_async(a_op, k_next, lds, nxt, scratch, whole=whole)
            issue_async(b_op, k_next, lds, nxt, scratch, nxt_state, whole=whole)
        if zero_fill:
            kb.async_commit()
        accs = mma_tile(ctx, kb.gep(lds, kb.add(a_lane, cur)),
                        kb.gep(lds, kb.add(b_lane, cur)), accs)
        ring = [wrap(cur, 0, S)] + ([] if zero_fill else [wrap(spare, spare0, S - 1)])
        return [*accs, *(v for st in nxt_state or () for v in st), *ring]

    rings0 = [const(0)] + ([] if zero_fill else [const(spare0)])
    carried0 = [*accs0, *(v for st in state for v in st), *rings0]
    # the steady state: phases whose tile t+S-1 is whole (kt + S·tile_k <= k_end)
    whole_end = kb.select(whole_tiles_inside(ctx), kb.sub(ctx.k_end, S * tk - 1), ctx.k_begin)
    with kb.for_(ctx.k_begin, whole_end, tk, carried=[*carried0, ctx.k_begin]) as loop:
        kt = loop.index
        loop.yield_(*phase(kt, list(loop.carried)[:-1], whole=True), kb.add(kt, tk))
    res = list(loop.results)
    # the last S - 1 phases (every phase where whole_tiles_inside fails): checked
    with kb.for_(res[-1], ctx.k_end, tk, carried=res[:-1]) as loop:
        loop.yield_(*phase(loop.index, list(loop.carried), whole=False))
    return list(loop.results[:n_acc])
