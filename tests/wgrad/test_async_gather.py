"""The async loop's B gather from carried k rows (slots.row_tile_slots, XOperand.
row_state / advance): a thread's B chunks in few k rows, one carried state per row; exact
at every wrap pattern, no division in the loop."""

from __future__ import annotations

import numpy as np
import pytest
from wgrad_cases import EDGE, WRAPS, check, make_spec

from wgradcache.kernel.emulate import EmulationError, emulate
from wgradcache.kernel.ir import Ops
from wgradcache.kernel.ir import walk as ir_walk
from wgradcache.model.problem import ConvProblem
from wgradcache.numerics.error_model import peak_normalised_error
from wgradcache.numerics.reference import reference_dw
from wgradcache.numerics.run import from_storage, prepare_run, to_storage
from wgradcache.pipeline.emulate import cached_kernel, run_emulated
from wgradcache.wgrad.abi import wgrad_values
from wgradcache.wgrad.context import open_wgrad_kernel
from wgradcache.wgrad.kernel import build_kernel, kernel_symbol
from wgradcache.wgrad.kloop import GATHER_STATE_MAX_SLOTS
from wgradcache.wgrad.operand_b import b_operand
from wgradcache.wgrad.slots import ROW_SEGMENT_BYTES


def _spec(geometry, problem, chunks=(16, 16), **kw):
    return make_spec("gfx1250", "fp16", geometry, problem, k_loop="async", chunk_a=chunks[0],
                     chunk_b=chunks[1], **kw)


def _loops(spec):
    """The steady-state loop over whole tiles and the checked one after it."""
    whole, checked = [v for v in ir_walk(build_kernel(spec).body) if v.op is Ops.FOR]
    return whole, checked


def _b_slots(spec):
    ctx = open_wgrad_kernel(spec, kernel_symbol(spec))
    return b_operand(ctx, spec.chunk_b // 2, max_rows=GATHER_STATE_MAX_SLOTS)


# (geometry, chunks, split, rows a thread): 4 threads a row, 2 slots of 8 elements; 4
# threads a row, 4 slots of 4 elements; 4-byte chunks, 8 threads a row, 2 rows of 4 slots;
# tile_k 64 (2 threads a row, 4 slots) over 3 slices; one wave, 8 rows of 2 slots
ONE_ROW = [((64, 64, 32, 2, 2), (16, 16), 1, 1), ((64, 64, 32, 2, 2), (16, 8), 1, 1),
           ((64, 64, 32, 2, 2), (4, 4), 1, 2), ((64, 64, 64, 2, 2), (16, 16), 3, 1),
           ((32, 32, 32, 1, 1), (4, 4), 1, 8)]


@pytest.mark.parametrize("name", sorted(WRAPS))
@pytest.mark.parametrize("geometry, chunks, split, rows", ONE_ROW)
def test_row_gather_is_exact(name, geometry, chunks, split, rows):
    problem = WRAPS[name]
    red = {"reduction": "atomic", "dw": "fp32"} if split > 1 else {}
    spec = _spec(geometry, problem, chunks, **red)
    assert max(_b_slots(spec).row_of) + 1 == rows
    check(run_emulated(spec, problem, split_k=split, seed=len(name)), spec.dw_dtype)


def test_row_gather_on_the_edge_problem():
    spec = _spec((128, 128, 32, 2, 4), EDGE)  # 8 threads a row, 2 slots
    assert _b_slots(spec).row_of == (0, 0)
    check(run_emulated(spec, EDGE), "fp16")


def test_row_gather_divides_only_before_the_loop():
    """One (wo, ho, offset) carried per row of the thread (not per slot); the loop body
    has no division and no 64-bit value. Adjacent threads take adjacent chunks of a row in
    runs of at least a sector. Where the rows would pass the bound, the plain slots stay
    and divide per tile."""
    spec = _spec((64, 64, 32, 2, 2), EDGE, (4, 4))
    b = _b_slots(spec)
    assert b.row_of == (0,) * 4 + (1,) * 4
    # threads 8r .. 8r + 7 share row r (and r + 16); 8 x 4 bytes = one sector
    assert 8 * 4 == ROW_SEGMENT_BYTES
    whole, checked = _loops(spec)
    for loop in (whole, checked):
        body = list(ir_walk(loop.arg.body))
        assert not [v for v in body
                    if v.op in (Ops.UDIV, Ops.UREM) or v.dtype.scalar == "i64"]
    # a wave's 2x2 accumulators, 2 rows (and the whole loop's next tile)
    assert len(whole.arg.carried) == 4 + 2 * 3 + 1
    assert len(checked.arg.carried) == 4 + 2 * 3
    ctx = open_wgrad_kernel(spec, kernel_symbol(spec))
    assert b_operand(ctx, 2, max_rows=1).row_of is None


# 2 images of 9x9: wg_K 162 = five whole tiles of 32 rows and a partial one
TWO_IMAGES = ConvProblem.parse("2,8,9,9,40,3,3,1,1")


def _run_with_dy_bytes(spec, rows: int, dy_bytes: int):
    """Emulate ``spec`` on TWO_IMAGES with dY's buffer cut after ``rows`` GEMM rows (a
    read past it is a fault) and ``dy_bytes`` as the kernel argument; the reference has
    dY's rows from ``rows`` on zeroed."""
    problem = TWO_IMAGES
    plan, x, dy, _, bound = prepare_run(spec, problem, split_k=1, seed=3)
    kept = dy.reshape(-1, problem.K).copy()
    kept[rows:] = 0
    ref = reference_dw(problem, x, kept.reshape(dy.shape))
    args = wgrad_values(problem, spec, degree=plan.degree, slice_k=plan.slice_k)
    dw = to_storage(np.full(problem.dw_shape, np.nan), spec.dw_dtype)
    args.update(dy_ptr=to_storage(dy, spec.dtype).reshape(-1)[:rows * problem.K].copy(),
                x_ptr=to_storage(x, spec.dtype), dw_ptr=dw, ws_ptr=np.zeros(1, np.float32),
                dy_bytes=dy_bytes)
    emulate(cached_kernel(spec), plan.grid, args)
    out = from_storage(dw, spec.dw_dtype).reshape(problem.dw_shape)
    return peak_normalised_error(out, ref), bound.bound


@pytest.mark.parametrize("chunks", [(16, 16), (4, 4)])
def test_understated_dy_bytes_takes_the_checked_path(chunks):
    """A dY buffer shorter than the problem's rows: the steady-state loop's plain A copies
    would read past it, so the kernel's whole-tile check sends every tile through the
    checked phases, whose range check lands zeros past dy_bytes; no read leaves the buffer
    (the emulator faults on one, shown by the run that claims the whole size)."""
    spec = _spec((64, 64, 32, 2, 2), TWO_IMAGES, chunks)
    rows, k_bytes = 145, TWO_IMAGES.K * 2
    error, bound = _run_with_dy_bytes(spec, rows, rows * k_bytes)
    assert error <= bound
    with pytest.raises(EmulationError, match="out of bounds"):
        _run_with_dy_bytes(spec, rows, 162 * k_bytes)  # a lie the kernel cannot check
