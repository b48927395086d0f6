"""The pipelined sync loop (two LDS stages, one barrier per K tile): the emulator's race and
hazard checks over the ladder's geometries at a problem of several K tiles with a tail, and
the race it reports in the single-stage form."""

from __future__ import annotations

import pytest
from wgrad_cases import AB_DTYPES, TARGETS, WRAPS, check, make_spec, shipped_limits

from wgradcache.jobs.walk import walk
from wgradcache.kernel.ir import Ops
from wgradcache.kernel.ir import walk as ir_walk
from wgradcache.model.problem import ConvProblem
from wgradcache.model.spec import LoadWidths, Tile, loads_fit
from wgradcache.model.targets import get_target
from wgradcache.pipeline.emulate import run_emulated
from wgradcache.wgrad.context import open_wgrad_kernel
from wgradcache.wgrad.epilogue import default_epilogue
from wgradcache.wgrad.kernel import build_kernel, kernel_symbol
from wgradcache.wgrad.kloop import GATHER_STATE_MAX_SLOTS, sync_k_loop
from wgradcache.wgrad.operand_b import b_operand

# wg_K 162: 6 tiles of 32 (a 2-row tail), 3 of 64 (a 34-row tail): every stage is written
# again after a barrier, at both tile_k; M 40 and N 72 leave partial tiles, pad 1
PIPE = ConvProblem.parse("2,8,9,9,40,3,3,1,1")


def _ladder(target):
    return sorted({s.geometry for s in walk(target, ["fp16"]) if s.variant == "sync.default.none"})


def _cases():
    for t in TARGETS:
        for i, g in enumerate(_ladder(t)):
            if t == "gfx1250" or i % 3 == TARGETS.index(t):
                yield pytest.param(t, g, i, id=f"{t}-t{g[0]}x{g[1]}x{g[2]}-w{g[3]}x{g[4]}")


@pytest.mark.parametrize("target, geometry, i", list(_cases()))
def test_pipelined_loop_is_race_free(target, geometry, i):
    """No LDS race, no hazard, numerics within the bound: every gfx1250 ladder geometry and
    every third of the others (rotating dtype and load widths)."""
    dtype = AB_DTYPES[i % 2]
    rotation = [(8, 8), (4, 4), (8, 1), (1, 1), (2, 8)]
    # the i-th pair of the rotation that the target's load budget admits on this geometry
    vec = next(v for j in range(5) for v in [rotation[(i + j) % 5]]
               if loads_fit(Tile(get_target(target), dtype, geometry), LoadWidths("sync", *v),
                            shipped_limits(target))[0])
    spec = make_spec(target, dtype, geometry, PIPE, vec=vec)
    check(run_emulated(spec, PIPE, seed=i), dtype)


def _loop(kd):
    (loop,) = [v for v in ir_walk(kd.body) if v.op is Ops.FOR]
    return loop


def test_one_barrier_per_k_tile_and_loads_before_the_mmas():
    spec = make_spec("gfx1250", "fp16", (64, 64, 32, 2, 2), PIPE, vec=(8, 8))
    body = _loop(build_kernel(spec)).arg.body
    ops = [v.op for v in ir_walk(body)]
    assert ops.count(Ops.BARRIER) == 1
    first_mma = ops.index(Ops.MMA)
    loads = [j for j, op in enumerate(ops) if op is Ops.BOUNDED_LOAD]
    # tile t+1's global loads (2 + 2 per thread) are all issued before tile t's first MMA,
    # after the barrier that publishes tile t's stores
    assert len(loads) == 4 and ops.index(Ops.BARRIER) < min(loads) and max(loads) < first_mma
    assert not any(op is Ops.IF for op in ops)


def _single_stage(spec):
    ctx = open_wgrad_kernel(spec, kernel_symbol(spec))
    default_epilogue(ctx, sync_k_loop(ctx, planted_race=True))
    return ctx.kb.finish()


def test_single_stage_race_is_reported(monkeypatch):
    """One stage with the single barrier: tile t+1 is stored while slower waves still read
    tile t. The emulator must report that write (the hazard the second stage removes)."""
    import wgradcache.pipeline.emulate as pe

    spec = make_spec("gfx1250", "fp16", (64, 64, 32, 2, 2), PIPE, vec=(8, 8))
    check(run_emulated(spec, PIPE), "fp16")  # two stages: clean
    monkeypatch.setattr(pe, "cached_kernel", _single_stage)
    r = run_emulated(spec, PIPE)
    assert not r.passed and r.out is None
    assert "LDS race" in r.hazards and "writes byte" in r.hazards, r.hazards
    assert "read by" in r.hazards, r.hazards


def test_every_walked_sync_kernel_gets_two_stages():
    from wgradcache.model.spec import sync_stages
    for t in ("gfx1250", "gfx1201", "gfx1151", "gfx942", "gfx950"):
        tgt = get_target(t)
        shapes = {(s.dtype, s.geometry) for s in walk(t) if s.k_loop == "sync"}
        assert shapes and {sync_stages(Tile(tgt, d, g)) for d, g in shapes} == {2}, t


def test_one_stage_where_two_do_not_fit():
    """128x128x64 on gfx1201 (outside the ladder's k-step budget): two stages would take
    72 KiB of its 64 KiB, so one stage, a second barrier, same numerics, no race."""
    from wgradcache.model.spec import KernelSpec, lds_bytes, sync_stages

    spec = KernelSpec("gfx1201", "fp16", "fp16", 128, 128, 64, 2, 4, vec_a=8, vec_b=8)
    assert sync_stages(spec.tile) == 1
    assert lds_bytes(spec) == 256 * 72 * 2
    kd = build_kernel(spec)
    assert [v.op for v in ir_walk(_loop(kd).arg.body)].count(Ops.BARRIER) == 2
    check(run_emulated(spec, PIPE), "fp16")


def _loop_ops(spec):
    return list(ir_walk(_loop(build_kernel(spec)).arg.body))


@pytest.mark.parametrize("name", sorted(WRAPS))
@pytest.mark.parametrize("geometry, split", [((64, 64, 32, 2, 2), 1), ((64, 64, 64, 2, 2), 3)])
def test_carried_gather_coordinates(name, geometry, split):
    problem = WRAPS[name]
    red = {"reduction": "atomic", "dw": "fp32"} if split > 1 else {}
    spec = make_spec("gfx1250", "fp16", geometry, problem, vec=(8, 8), **red)
    check(run_emulated(spec, problem, split_k=split, seed=len(name)), spec.dw_dtype)


def test_gather_divides_only_before_the_loop():
    """With the coordinates carried, the loop body has no division and no 64-bit value (the
    magic divisions' products); three carried registers per B slot. Above the slot bound
    the loop divides per tile again (and stays exact: test_pipelined_loop_is_race_free)."""
    spec = make_spec("gfx1250", "fp16", (64, 64, 32, 2, 2), PIPE, vec=(8, 8))
    body = _loop_ops(spec)
    assert not [v for v in body if v.op in (Ops.UDIV, Ops.UREM) or v.dtype.scalar == "i64"]
    # 4 accumulators (a wave's 32x32 sub-tile), 4 prefetched vectors (2 A, 2 B), the B
    # slots' one k row x 3 coordinates (K-outer: row_tile_slots), the stage offset
    ctx = open_wgrad_kernel(spec, kernel_symbol(spec))
    b = b_operand(ctx, 8, max_rows=GATHER_STATE_MAX_SLOTS)
    assert len(b.slots) == 2 and b.row_of == (0, 0)
    assert len(_loop(build_kernel(spec)).arg.carried) == 4 + 4 + 1 * 3 + 1
    # K-contiguous narrow B (kc_row_tile_slots): 128 slots of 8 columns share 16 k rows,
    # one carried state per row, no division in the loop
    narrow = make_spec("gfx1250", "bf16", (32, 128, 64, 1, 2), PIPE, vec=(1, 1))
    ctx = open_wgrad_kernel(narrow, kernel_symbol(narrow))
    b = b_operand(ctx, 1, max_rows=GATHER_STATE_MAX_SLOTS)
    assert len(b.slots) == 128 and sorted(set(b.row_of)) == list(range(16))
    assert not [v for v in _loop_ops(narrow) if v.dtype.scalar == "i64"]
    # one wave of a 32x32x64 tile has 32 rows a thread: 4 carried, 28 derived, no division
    deep = make_spec("gfx1250", "bf16", (32, 32, 64, 1, 1), PIPE, vec=(1, 1))
    ctx = open_wgrad_kernel(deep, kernel_symbol(deep))
    b = b_operand(ctx, 1, max_rows=GATHER_STATE_MAX_SLOTS)
    assert len(set(b.row_of)) == 32 and b.derive == tuple(range(8))
    assert len(_loop(build_kernel(deep)).arg.carried) == 4 + 4 * 3 + 1  # no prefetch here
    assert not [v for v in _loop_ops(deep) if v.dtype.scalar == "i64"]


@pytest.mark.parametrize("vec", [(8, 8), (1, 1)])
def test_per_tile_division_when_no_state_is_carried(monkeypatch, vec):
    """The loop's fallback when a thread's B rows cannot be carried (no walk kernel takes
    it now): both magic divisions per vector per tile, with the compare pick (2 vectors) and
    the sign pick (32 vectors); exact on the wrapping problems."""
    import wgradcache.wgrad.kloop as kloop
    monkeypatch.setattr(kloop, "GATHER_STATE_MAX_SLOTS", 0)
    spec = make_spec("gfx1250", "fp16", (32, 32, 64, 1, 1), WRAPS["s2d2"], vec=vec)
    assert [v for v in _loop_ops(spec) if v.dtype.scalar == "i64"]
    check(run_emulated(spec, WRAPS["s2d2"], seed=3), spec.dw_dtype)
    check(run_emulated(spec, PIPE, seed=4), spec.dw_dtype)


@pytest.mark.parametrize("name", sorted(WRAPS))
@pytest.mark.parametrize("target, geometry", [
    ("gfx1250", (32, 32, 64, 1, 1)),   # 4 groups of 8 rows a thread: one carried, 7 derived
    ("gfx1250", (32, 128, 64, 1, 2)),  # 16 rows shared by 8 columns, all carried
    ("gfx1201", (32, 64, 32, 1, 4)),   # the gfx12 LDS k order (4-element runs)
])
def test_k_contiguous_rows_shared_and_derived(name, target, geometry):
    """Narrow B on a K-contiguous tile (kc_row_tile_slots): a thread's columns share its k
    rows; past GATHER_STATE_MAX_SLOTS rows only each group's first is carried and the
    others are stepped from it every tile. The WRAPS problems make consecutive rows wrap
    wo (Wo 1, 3), ho and the image (HoWo 1, 9, 15) inside one group."""
    problem = WRAPS[name]
    spec = make_spec(target, "fp16", geometry, problem, vec=(1, 1))
    ctx = open_wgrad_kernel(spec, kernel_symbol(spec))
    b = b_operand(ctx, 1, max_rows=GATHER_STATE_MAX_SLOTS)
    assert b.row_of is not None and len(b.slots) > len(set(b.row_of))
    assert (b.derive is not None) == (len(set(b.row_of)) > GATHER_STATE_MAX_SLOTS)
    assert not [v for v in _loop_ops(spec) if v.op in (Ops.UDIV, Ops.UREM)
                or v.dtype.scalar == "i64"]
    check(run_emulated(spec, problem, seed=len(name)), spec.dw_dtype)
