"""The variants in the emulator, each on the problems that exercise its edges: atomic
split-K (degrees, empty slices, groups), cshuffle, two-stage (odd wg_N, replica collisions),
the async K loop (gfx1250, partial tiles and odd slice tails)."""

from __future__ import annotations

import pytest
from wgrad_cases import EDGE, PROBLEMS, check, make_spec

from wgradcache.jobs import walk
from wgradcache.model.problem import ConvProblem
from wgradcache.pipeline.emulate import run_emulated

# wg_K 200 = 7 tiles of 32 (the last partial): degree 7 gives 7 one-tile slices, 8 one empty
K7 = ConvProblem.parse("2,8,10,10,16,3,3,1,1")
K7G = ConvProblem.parse("2,16,10,10,16,3,3,1,1,1,2")  # the same per group, 2 groups
STEM = ConvProblem.parse("3,3,14,14,16,3,3,2,1")  # wg_N 27 (odd), wg_K 147 = 5 tiles


def _run(spec, p, degree, dw, seed=0):
    r = run_emulated(spec, p, split_k=degree, seed=seed)
    assert r.plan.degree == degree and r.plan.reduction == spec.reduction
    assert r.plan.grid[2] == p.groups * degree
    check(r, dw)
    return r


# ---- atomic split-K ---------------------------------------------------------------------

@pytest.mark.parametrize("target", ("gfx1250", "gfx1201"))
@pytest.mark.parametrize("degree", (1, 2, 3, 7, 8))
def test_atomic_fp16_degrees(target, degree):
    spec = make_spec(target, "fp16", (32, 64, 32, 1, 2), K7, reduction="atomic")
    r = _run(spec, K7, degree, "fp16", seed=degree)
    assert r.plan.slice_k == {1: 224, 2: 128, 3: 96, 7: 32, 8: 32}[degree]


@pytest.mark.parametrize("target", ("gfx1250", "gfx1201", "gfx1151"))
@pytest.mark.parametrize("degree", (2, 7, 8))
def test_atomic_fp32_dw_degrees(target, degree):
    spec = make_spec(target, "bf16", (64, 32, 32, 2, 1), K7, dw="fp32", reduction="atomic")
    _run(spec, K7, degree, "fp32", seed=degree)


@pytest.mark.parametrize("target", ("gfx1250", "gfx1201"))
@pytest.mark.parametrize("name, degree", [("partialMN", 1), ("3x3s1p1", 2), ("oddK", 3)])
def test_atomic_bf16(target, name, degree):
    """bf16 partials round at 2^-8 per add: degrees up to two non-empty slices keep the
    bound under 1e-2 (oddK at 3 has one empty slice)."""
    p = PROBLEMS[name]
    spec = make_spec(target, "bf16", (64, 64, 32, 2, 2), p, reduction="atomic")
    _run(spec, p, degree, "bf16")


@pytest.mark.parametrize("target, dw", [("gfx1250", "fp16"), ("gfx1201", "fp16"),
                                        ("gfx1151", "fp32")])
@pytest.mark.parametrize("degree", (3, 7))
def test_atomic_groups(target, dw, degree):
    spec = make_spec(target, "fp16", (32, 32, 32, 1, 1), K7G, dw=dw, reduction="atomic")
    _run(spec, K7G, degree, dw)


def test_atomic_tile_k_64_and_stride():
    p = PROBLEMS["3x3s2"]
    spec = make_spec("gfx1250", "fp16", (64, 128, 64, 2, 4), p, reduction="atomic")
    _run(spec, p, 2, "fp16")


# ---- cshuffle -------------------------------------------------------------------------

@pytest.mark.parametrize("target", ("gfx1250", "gfx1201", "gfx1151"))
@pytest.mark.parametrize("dtype, name, vec", [("fp16", "partialMN", (8, 8)),
                                              ("bf16", "3x3s2", (4, 2)),
                                              ("fp16", "stem", (2, 1))])
def test_cshuffle_store(target, dtype, name, vec):
    p = PROBLEMS[name]
    spec = make_spec(target, dtype, (64, 64, 32, 2, 2), p, vec=vec, epilogue="cshuffle")
    assert spec.store_vec == vec[1]
    check(run_emulated(spec, p), dtype)


@pytest.mark.parametrize("target, dtype, dw, vec, degree", [
    ("gfx1250", "fp16", "fp16", (8, 8), 7), ("gfx1250", "bf16", "bf16", (4, 2), 2),
    ("gfx1201", "fp16", "fp16", (2, 4), 3), ("gfx1201", "bf16", "fp32", (8, 8), 8),
    ("gfx1151", "fp16", "fp32", (1, 2), 7)])
def test_cshuffle_atomic(target, dtype, dw, vec, degree):
    spec = make_spec(target, dtype, (32, 64, 32, 1, 2), K7, dw=dw, vec=vec,
                     epilogue="cshuffle", reduction="atomic")
    _run(spec, K7, degree, dw)


def test_cshuffle_atomic_groups_partial_tiles():
    p = ConvProblem.parse("2,16,10,10,48,3,3,1,1,1,2")  # kpg 24 on 32-row tiles
    spec = make_spec("gfx1250", "fp16", (32, 32, 32, 1, 1), p, vec=(8, 8),
                     epilogue="cshuffle", reduction="atomic")
    _run(spec, p, 3, "fp16")


# ---- two-stage ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype, dw", [("fp16", "fp16"), ("bf16", "bf16"), ("fp16", "fp32")])
@pytest.mark.parametrize("degree, replicas", [(1, 8), (3, 8), (7, 3), (7, 1), (9, 8)])
def test_two_stage_stem(dtype, dw, degree, replicas):
    """Odd wg_N (no packed pair exists); replicas below the degree make slices share a slab."""
    spec = make_spec("gfx1250", dtype, (32, 32, 32, 1, 1), STEM, dw=dw,
                     reduction="two_stage", ws_replicas=replicas)
    r = _run(spec, STEM, degree, dw)
    assert r.plan.workspace_bytes == replicas * 16 * 27 * 4


def test_two_stage_groups():
    spec = make_spec("gfx1250", "bf16", (64, 64, 32, 2, 2), K7G, reduction="two_stage",
                     ws_replicas=4)
    _run(spec, K7G, 7, "bf16")


# ---- async K loop (gfx1250) -----------------------------------------------------------

ASYNC_CASES = [
    # (dtype, dw, epilogue, reduction, chunks, geometry, problem, degree)
    ("fp16", "fp16", "default", "none", (16, 16), (64, 64, 32, 2, 2), "partialMN", None),
    ("bf16", "bf16", "default", "none", (4, 4), (32, 32, 32, 1, 1), "3x3s2", None),
    ("fp16", "fp16", "cshuffle", "none", (16, 4), (64, 64, 64, 2, 2), "dil2", None),
    ("bf16", "bf16", "cshuffle", "none", (8, 16), (128, 64, 32, 4, 2), "oddK", None),
    ("fp16", "fp16", "default", "atomic", (16, 16), (32, 64, 32, 1, 2), "K7", 3),
    ("fp16", "fp32", "default", "atomic", (8, 8), (64, 32, 32, 2, 1), "K7", 8),
    ("bf16", "bf16", "cshuffle", "atomic", (16, 4), (32, 64, 32, 2, 2), "oddK", 2),
    ("fp16", "fp16", "cshuffle", "atomic", (4, 16), (64, 64, 32, 2, 2), "K7G", 7),
    ("bf16", "fp32", "cshuffle", "atomic", (16, 16), (32, 32, 64, 1, 1), "groups2", 3),
]
_ASYNC_PROBLEMS = {**PROBLEMS, "K7": K7, "K7G": K7G}


@pytest.mark.parametrize("dtype, dw, epilogue, reduction, chunks, geometry, name, degree",
                         ASYNC_CASES)
def test_async(dtype, dw, epilogue, reduction, chunks, geometry, name, degree):
    p = _ASYNC_PROBLEMS[name]
    spec = make_spec("gfx1250", dtype, geometry, p, dw=dw, k_loop="async",
                     epilogue=epilogue, reduction=reduction, chunk_a=chunks[0],
                     chunk_b=chunks[1])
    if degree is None:
        check(run_emulated(spec, p), dw)
    else:
        _run(spec, p, degree, dw)


def test_async_odd_slice_tail():
    """Degree 3 over 7 tiles: slices of 3, 3 and 1 tiles, the last one partial."""
    spec = make_spec("gfx1250", "fp16", (32, 64, 32, 1, 2), K7, k_loop="async",
                     reduction="atomic", chunk_a=16, chunk_b=16)
    r = _run(spec, K7, 3, "fp16")
    assert r.plan.slice_k == 96 and 2 * 96 < K7.wg_K < 3 * 96


def _async_ladder() -> list[tuple]:
    """Every geometry the gfx1250 walk gives the async loop."""
    return sorted({s.geometry for s in walk("gfx1250", ["fp16"]) if s.k_loop == "async"})


@pytest.mark.parametrize("i, geometry", list(enumerate(_async_ladder())))
def test_async_every_ladder_geometry(i, geometry):
    """The branch-free chunks (copies into scratch slots, selected zero stores) on every
    async geometry, with race and in-flight checks, on the all-edges problem; the narrowest
    and the widest chunks alternate."""
    chunks = (4, 4) if i % 2 else (16, 16)
    spec = make_spec("gfx1250", "fp16", geometry, EDGE, k_loop="async", chunk_a=chunks[0],
                     chunk_b=chunks[1])
    check(run_emulated(spec, EDGE, seed=i), "fp16")
