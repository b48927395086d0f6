"""The async loop's deeper LDS ring (``spec.stages`` 3 and 4, ``kloop._ring_k_loop``): in
the emulator against float64 on gfx1250 (copies counted per wave, scratch stages) and sm_90
(cp.async groups), at the K loop's edges (one tile, two tiles: fewer than S - 1, a long
loop split 1, 2, 3, 7 ways with an empty last slice) in every variant the async loop
takes; the planted hazards (one tile fewer waited for, the ring index one off) reported;
the loop's shape in the IR."""

from __future__ import annotations

import dataclasses

import pytest
from wgrad_cases import EDGE, check, make_spec

import wgradcache.pipeline.emulate as pe
from wgradcache.kernel.ir import Ops
from wgradcache.kernel.ir import walk as ir_walk
from wgradcache.model.problem import ConvProblem
from wgradcache.model.spec import KernelSpec, async_copies_per_tile, ring_wait_depth
from wgradcache.pipeline.emulate import run_emulated
from wgradcache.wgrad.context import open_wgrad_kernel
from wgradcache.wgrad.epilogue import default_epilogue
from wgradcache.wgrad.kernel import build_kernel, kernel_symbol
from wgradcache.wgrad.kloop import RING_PLANTS, async_k_loop

TARGETS = ("gfx1250", "sm_90")
ONE_TILE = ConvProblem.parse("1,8,4,4,40,3,3,1,1")  # wg_K 16: one partial K tile
TWO_TILES = EDGE  # wg_K 49: two tiles, fewer than S - 1 for S = 4
# wg_K 162 (6 tiles of 32): split 7 leaves the last slice empty, 3 and 2 end on a partial
# tile; M 136 (5 tile-rows, the last partial), N 72; 3x3 pad 1
LONG = ConvProblem.parse("2,8,9,9,136,3,3,1,1")


def _ring(target: str, stages: int, problem: ConvProblem | None = None, **kw) -> KernelSpec:
    """A small ring kernel (the walk deepens 128x128 tiles only; the rule admits any):
    validated against the rules alone, as the generator is."""
    base = dict(target=target, dtype="fp16", dw_dtype="fp16", tile_m=32, tile_n=64,
                tile_k=32, warp_m=1, warp_n=2, chunk_a=8, chunk_b=8, k_loop="async",
                stages=stages)
    return KernelSpec(**{**base, **kw})


def _run(spec: KernelSpec, p: ConvProblem, degree: int | None = None):
    r = run_emulated(spec, p, split_k=degree, seed=spec.stages + (degree or 0))
    check(r, spec.dw_dtype)
    return r


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("stages", (3, 4))
@pytest.mark.parametrize("problem", (ONE_TILE, TWO_TILES, LONG), ids=("one", "two", "long"))
def test_ring_edges_of_the_k_loop(target, stages, problem):
    """One tile (the prologue issues one, the rest are past k_end), two tiles (a ring of 4
    never fills), six (a steady state, then the checked last S - 1 phases)."""
    r = _run(_ring(target, stages), problem)
    twin = run_emulated(_ring(target, 2), problem, seed=stages)
    assert r.error == twin.error  # the same sums in the same order as the ping-pong


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("stages", (3, 4))
@pytest.mark.parametrize("degree", (1, 2, 3, 7))
@pytest.mark.parametrize("variant", (("default", "atomic"), ("cshuffle", "atomic"),
                                     ("default", "two_stage")))
def test_ring_split_k_variants(target, stages, degree, variant):
    """Split-K slices of 6 tiles into 1, 2, 3 and 7 (the last slice empty: its CTAs run no
    phase and issue only past k_end), atomic from either epilogue and two-stage."""
    epilogue, reduction = variant
    spec = _ring(target, stages, epilogue=epilogue, reduction=reduction,
                 ws_replicas=8 if reduction == "two_stage" else 0)
    _run(spec, LONG, degree)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype, dw", (("bf16", "bf16"), ("fp16", "fp32")))
def test_ring_unsplit_cshuffle_dtypes_and_narrow_chunks(target, dtype, dw):
    _run(_ring(target, 3, dtype=dtype, dw_dtype=dw, epilogue="cshuffle"), LONG)
    _run(_ring(target, 4, dtype=dtype, dw_dtype=dw, chunk_a=4, chunk_b=4), LONG)


@pytest.mark.parametrize("target", TARGETS)
def test_a_walked_ring_geometry_on_the_edges(target):
    """A 128x128 tile of the walk, 3 stages, with race and in-flight checks."""
    spec = make_spec(target, "fp16", (128, 128, 32, 2, 4), EDGE, k_loop="async", chunk_a=16,
                     chunk_b=16, stages=3, reduction="atomic")
    _run(spec, LONG, 3)


def _planted(plant: str):
    def kernel(spec):
        ctx = open_wgrad_kernel(spec, kernel_symbol(spec))
        default_epilogue(ctx, async_k_loop(ctx, plant=plant))
        return ctx.kb.finish()
    return kernel


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("stages", (2, 3, 4))
@pytest.mark.parametrize("plant", RING_PLANTS)
def test_planted_ring_hazards_are_reported(monkeypatch, target, stages, plant):
    """Waiting for one tile fewer leaves tile t in flight when it is read (or, on gfx1250,
    its scratch slot when the next zero store lands there); the ring index one off copies
    tile t+S-1 into the stage tile t is read from. Each is an emulator error at every
    depth; the honest kernel of the same spec passes first."""
    spec = _ring(target, stages)
    _run(spec, LONG)
    monkeypatch.setattr(pe, "cached_kernel", _planted(plant))
    r = run_emulated(spec, LONG, seed=1)
    assert not r.passed and r.out is None
    assert "while an async copy of lane" in r.hazards and "is in flight" in r.hazards, (
        r.hazards)


def _steady(spec: KernelSpec):
    """The ring's steady-state loop (the first FOR after the prologue with MMAs)."""
    loops = [v for v in ir_walk(build_kernel(spec).body) if v.op is Ops.FOR]
    return next(lp for lp in loops if any(v.op is Ops.MMA for v in ir_walk(lp.arg.body)))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("stages", (3, 4))
def test_the_steady_phase_waits_for_the_oldest_tile_only_behind_one_barrier(target, stages):
    """One wait and one barrier per K tile, the wait before the barrier, the copies of tile
    t+S-1 after it and before the MMAs; on sm_90 wait_group S-2 and one commit a phase,
    on gfx1250 a count of S-2 tiles' copies (ring_wait_depth); the prologue issues S-1
    tiles (S-1 commits on sm_90)."""
    spec = _ring(target, stages)
    body = list(ir_walk(_steady(spec).arg.body))
    ops = [v.op for v in body]
    wait_op = Ops.ASYNC_WAIT_GROUP if target == "sm_90" else Ops.ASYNC_WAIT
    copy_op = Ops.ASYNC_COPY_ZFILL if target == "sm_90" else Ops.ASYNC_COPY
    waits = [v for v in body if v.op in (Ops.ASYNC_WAIT, Ops.ASYNC_WAIT_GROUP)]
    assert [(w.op, w.arg) for w in waits] == [(wait_op, ring_wait_depth(spec))]
    want = stages - 2 if target == "sm_90" else (stages - 2) * async_copies_per_tile(spec)
    assert waits[0].arg == want and ops.count(Ops.BARRIER) == 1
    copies = [j for j, op in enumerate(ops) if op is copy_op]
    assert len(copies) == async_copies_per_tile(spec)
    assert ops.index(wait_op) < ops.index(Ops.BARRIER) < min(copies)
    assert max(copies) < ops.index(Ops.MMA)
    assert ops.count(Ops.ASYNC_COMMIT) == (1 if target == "sm_90" else 0)
    kd = build_kernel(spec)
    top = [v.op for v in kd.body]
    assert top.count(Ops.ASYNC_COMMIT) == (stages - 1 if target == "sm_90" else 0)
    assert kd.min_blocks == 1 and build_kernel(_ring(target, 2)).min_blocks == 0


def test_copies_per_tile_is_the_unguarded_slots_of_a_ragged_tile():
    """A's 128 chunks over a block of 256 leave half the threads without one (a guarded
    slot, not counted), B's 512 give each thread 2: the wave's wait counts 2 a tile."""
    spec = _ring("gfx1250", 3, tile_m=32, tile_n=128, warp_m=2, warp_n=4, chunk_a=16,
                 chunk_b=16)
    assert async_copies_per_tile(spec) == 2 and ring_wait_depth(spec) == 2
    body = list(ir_walk(_steady(spec).arg.body))
    direct = [v for v in _steady(spec).arg.body if v.op is Ops.ASYNC_COPY]
    assert len(direct) == 2 and sum(v.op is Ops.ASYNC_COPY for v in body) == 3
    _run(spec, LONG)


def test_the_wait_count_is_capped_at_the_counter():
    """4-byte chunks of a 128x128x64 tile: 32 copies a thread a tile; three tiles in flight
    would be 64, past the 6-bit count: the wait names 63 (one copy more retired)."""
    spec = dataclasses.replace(_ring("gfx1250", 4), tile_m=128, tile_n=128, tile_k=64,
                               warp_m=4, warp_n=2, chunk_a=4, chunk_b=4)
    assert async_copies_per_tile(spec) == 32 and ring_wait_depth(spec) == 63
    assert ring_wait_depth(dataclasses.replace(spec, stages=3)) == 32
