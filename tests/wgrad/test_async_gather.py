"""The async loop's B gather from one carried k row per thread (loaders.row_tile_slots,
OperandLoad.row_state / advance): exact at every wrap pattern, no division in the loop."""

from __future__ import annotations

import pytest
from wgrad_cases import EDGE, WRAPS, check, make_spec

from wgradcache.kernel.ir import Ops
from wgradcache.kernel.ir import walk as ir_walk
from wgradcache.pipeline.emulate import run_emulated
from wgradcache.wgrad.context import open_wgrad_kernel
from wgradcache.wgrad.kernel import build_kernel, kernel_symbol
from wgradcache.wgrad.loaders import ROW_SEGMENT_BYTES, b_operand


def _spec(geometry, problem, chunks=(16, 16), **kw):
    return make_spec("gfx1250", "fp16", geometry, problem, k_loop="async", chunk_a=chunks[0],
                     chunk_b=chunks[1], **kw)


def _loop(spec):
    (loop,) = [v for v in ir_walk(build_kernel(spec).body) if v.op is Ops.FOR]
    return loop


def _b_slots(spec):
    ctx = open_wgrad_kernel(spec, kernel_symbol(spec))
    return b_operand(ctx, spec.chunk_b // 2, one_row=True)


# (geometry, chunks, split): 4 threads a row with 2 slots of 8 elements; 4 threads a row
# with 4 slots of 4 elements; tile_k 64 (2 threads a row, 4 slots) over 3 slices
ONE_ROW = [((64, 64, 32, 2, 2), (16, 16), 1), ((64, 64, 32, 2, 2), (16, 8), 1),
           ((64, 64, 64, 2, 2), (16, 16), 3)]


@pytest.mark.parametrize("name", sorted(WRAPS))
@pytest.mark.parametrize("geometry, chunks, split", ONE_ROW)
def test_one_row_gather_is_exact(name, geometry, chunks, split):
    problem = WRAPS[name]
    red = {"reduction": "atomic", "dw": "fp32"} if split > 1 else {}
    spec = _spec(geometry, problem, chunks, **red)
    assert _b_slots(spec).shares_row()
    check(run_emulated(spec, problem, split_k=split, seed=len(name)), spec.dw_dtype)


def test_one_row_gather_on_the_edge_problem():
    spec = _spec((128, 128, 32, 2, 4), EDGE)  # 8 threads a row, 2 slots
    assert _b_slots(spec).shares_row()
    check(run_emulated(spec, EDGE), "fp16")


def test_one_row_gather_divides_only_before_the_loop():
    """One (wo, ho, offset) per thread carried (not per slot); the loop body has no
    division and no 64-bit value. Runs shorter than a sector keep the plain slots, which
    divide per tile."""
    spec = _spec((64, 64, 32, 2, 2), EDGE)
    b = _b_slots(spec)
    assert len(b.slots) == 2 and b.shares_row()
    # adjacent threads at adjacent vectors: 4 threads a row, slot j at vector tid % 4 + 4j
    body = list(ir_walk(_loop(spec).arg.body))
    assert not [v for v in body if v.op in (Ops.UDIV, Ops.UREM) or v.dtype.scalar == "i64"]
    assert len(_loop(spec).arg.carried) == 4 + 3  # a wave's 2x2 accumulators, one row
    narrow = _spec((64, 64, 32, 2, 2), EDGE, (4, 4))  # 4 threads x 4 bytes: 16-byte runs
    assert 4 * 4 < ROW_SEGMENT_BYTES and not _b_slots(narrow).shares_row()
    assert [v for v in ir_walk(_loop(narrow).arg.body) if v.dtype.scalar == "i64"]
    assert len(_loop(narrow).arg.carried) == 4
