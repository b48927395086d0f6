"""sm_90 (the m16n8k16 atom, NVIDIA lane maps) in the emulator against float64: the problem
matrix, fp32 dW, the packed-pair atomic split-K at every degree (empty slices too), groups,
cshuffle, two-stage with an odd wg_N, tile_k 64 (sm_90's own k-step budget) and a spread of
the ladder with every edge at once."""

from __future__ import annotations

import pytest
from wgrad_cases import AB_DTYPES, EDGE, PROBLEMS, check, geometry_for, make_spec

from wgradcache.jobs.walk import walk
from wgradcache.model.problem import ConvProblem
from wgradcache.pipeline.emulate import run_emulated
from wgradcache.wgrad.emit import emit_ir

T = "sm_90"
K7 = ConvProblem.parse("2,8,10,10,16,3,3,1,1")  # wg_K 200: 7 tiles of 32, the last partial
K7G = ConvProblem.parse("2,16,10,10,16,3,3,1,1,1,2")
STEM = ConvProblem.parse("3,3,14,14,16,3,3,2,1")  # wg_N 27 (odd)


def _run(spec, p, degree, dw, seed=0):
    r = run_emulated(spec, p, split_k=degree, seed=seed)
    assert r.plan.degree == degree and r.plan.reduction == spec.reduction
    check(r, dw)
    return r


@pytest.mark.parametrize("dtype", AB_DTYPES)
@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_problem_matrix(dtype, name):
    i = sorted(PROBLEMS).index(name) + AB_DTYPES.index(dtype)
    p = PROBLEMS[name]
    check(run_emulated(make_spec(T, dtype, geometry_for(T, dtype, i), p), p, seed=i), dtype)


@pytest.mark.parametrize("dtype, name", [("fp16", "3x3s2"), ("bf16", "stem")])
def test_fp32_dw(dtype, name):
    p = PROBLEMS[name]
    check(run_emulated(make_spec(T, dtype, (64, 64, 32, 2, 2), p, dw="fp32"), p), "fp32")


@pytest.mark.parametrize("degree", (1, 2, 3, 7, 8))
def test_atomic_fp16_pairs_at_every_degree(degree):
    """The lane's own (c, c+1) pair per packed add; degree 8 has an empty slice."""
    spec = make_spec(T, "fp16", (32, 64, 32, 1, 2), K7, reduction="atomic")
    r = _run(spec, K7, degree, "fp16", seed=degree)
    assert r.plan.slice_k == {1: 224, 2: 128, 3: 96, 7: 32, 8: 32}[degree]


@pytest.mark.parametrize("dw, degree", [("bf16", 2), ("fp32", 7), ("fp16", 3)])
def test_atomic_groups(dw, degree):
    dtype = "bf16" if dw == "bf16" else "fp16"
    spec = make_spec(T, dtype, (32, 32, 32, 1, 1), K7G, dw=dw, reduction="atomic")
    _run(spec, K7G, degree, dw)


def test_atomic_tile_k_64_stride():
    p = PROBLEMS["3x3s2"]
    spec = make_spec(T, "fp16", (64, 128, 64, 2, 2), p, reduction="atomic")
    _run(spec, p, 2, "fp16")


@pytest.mark.parametrize("dtype, dw, vec, degree", [("fp16", "fp16", (8, 8), 7),
                                                    ("bf16", "fp32", (4, 2), 3)])
def test_cshuffle_atomic(dtype, dw, vec, degree):
    spec = make_spec(T, dtype, (32, 64, 32, 1, 2), K7, dw=dw, vec=vec, epilogue="cshuffle",
                     reduction="atomic")
    _run(spec, K7, degree, dw)


def test_cshuffle_store_partial_tiles():
    p = PROBLEMS["partialMN"]
    check(run_emulated(make_spec(T, "bf16", (64, 64, 32, 2, 2), p, epilogue="cshuffle"), p),
          "bf16")


@pytest.mark.parametrize("dtype, dw, degree", [("fp16", "fp16", 3), ("bf16", "fp32", 9)])
def test_two_stage_odd_wg_n(dtype, dw, degree):
    spec = make_spec(T, dtype, (32, 32, 32, 1, 1), STEM, dw=dw, reduction="two_stage",
                     ws_replicas=8)
    _run(spec, STEM, degree, dw)


def _ladder():
    return sorted({s.geometry for s in walk(T, ["fp16"]) if s.variant == "sync.default.none"})


@pytest.mark.parametrize("i", range(0, 40, 5))
def test_ladder_spread_with_every_edge(i):
    geoms = _ladder()
    g = geoms[i * len(geoms) // 40]
    dtype = AB_DTYPES[i % 2]
    want = (8, 8) if i % 10 else (4, 4)  # else a vec pair the walk has at g (the budgets)
    walked = sorted({(s.vec_a, s.vec_b) for s in walk(T, ["fp16"])
                     if s.geometry == g and s.variant == "sync.default.none"})
    spec = make_spec(T, dtype, g, EDGE, vec=want if want in walked else walked[0])
    check(run_emulated(spec, EDGE, seed=i), dtype)


# ---- the async loop: cp.async with zero fill (ASYNC_COPY_ZFILL), two LDS stages ----------

def _async_geometries():
    return sorted({(s.geometry, s.chunk_a, s.chunk_b) for s in walk(T, ["fp16"])
                   if s.k_loop == "async" and s.variant == "async.default.none"})


def test_async_walk_has_two_stages_and_no_scratch_stage():
    """sm_90 walks the async loop at every cover geometry (no third, scratch stage: the copy
    zero-fills), with both chunk pairs; past 48 KB the two stages (or the deeper ring's
    ``stages``) are dynamic shared memory (the 227 KB opt-in)."""
    from wgradcache.model.spec import dynamic_lds_bytes, lds_bytes

    specs = [s for s in walk(T, ["fp16"]) if s.k_loop == "async"]
    assert {(s.chunk_a, s.chunk_b) for s in specs} == {(16, 16), (4, 4)}
    for s in specs:
        stage = s.tile_k * (s.tile_m + 8 + s.tile_n + 8) * 2
        assert lds_bytes(s) == max(s.stages * stage, s.tile_m * s.tile_n * 4 * (s.epilogue ==
                                                                          "cshuffle"))
        assert lds_bytes(s) <= 232448
        assert (dynamic_lds_bytes(s) > 0) == (lds_bytes(s) > 49152)
    assert any(dynamic_lds_bytes(s) for s in specs)
    text = emit_ir(specs[0]).ir_text
    assert "llvm.nvvm.cp.async.cg.shared.global.16.s" in text and "amdgcn" not in text


@pytest.mark.parametrize("i", range(len(_async_geometries())))
def test_async_every_walked_geometry_on_the_edge_problem(i):
    g, ca, cb = _async_geometries()[i]
    dtype = AB_DTYPES[i % 2]
    spec = make_spec(T, dtype, g, EDGE, k_loop="async", chunk_a=ca, chunk_b=cb)
    check(run_emulated(spec, EDGE, seed=i), dtype)


@pytest.mark.parametrize("name", ["3x3s2", "dil2", "groups2", "oddK", "partialMN", "1x1"])
@pytest.mark.parametrize("chunks", [(16, 16), (4, 4)])
def test_async_edge_problems(name, chunks):
    p = PROBLEMS[name]
    dtype = "bf16" if chunks == (4, 4) else "fp16"
    spec = make_spec(T, dtype, (32, 64, 32, 1, 2), p, k_loop="async", chunk_a=chunks[0],
                     chunk_b=chunks[1])
    check(run_emulated(spec, p, seed=len(name)), dtype)


@pytest.mark.parametrize("degree", (1, 2, 3, 7, 8))
def test_async_atomic_at_every_degree(degree):
    """Split-K slices of the async loop, degree 8 with an empty slice (the loop's first
    tile guard: no copy is issued, none is waited for)."""
    spec = make_spec(T, "fp16", (32, 64, 32, 1, 2), K7, reduction="atomic", k_loop="async",
                     chunk_a=16, chunk_b=16)
    _run(spec, K7, degree, "fp16", seed=degree)


@pytest.mark.parametrize("dtype, dw, degree", [("bf16", "fp32", 3), ("fp16", "fp16", 2)])
def test_async_cshuffle_atomic_and_fp32_dw(dtype, dw, degree):
    spec = make_spec(T, dtype, (64, 64, 32, 2, 2), K7G, dw=dw, epilogue="cshuffle",
                     reduction="atomic", k_loop="async", chunk_a=16, chunk_b=16)
    _run(spec, K7G, degree, dw)
