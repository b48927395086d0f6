"""The MFMA targets (gfx942 16x16x16, gfx950 16x16x32, wave64) in the emulator: every variant
their catalog admits x both targets x both A/B dtypes (and fp32 dW), on the edge problems:
reduction tails, padding, stride, dilation, groups, odd channels, C=3, partial tiles, split
degrees 1, 2, 3, 7 and an empty slice (8 over 7 K tiles), within the error model's bound."""

from __future__ import annotations

import pytest
from wgrad_cases import EDGE, PROBLEMS, check, make_spec

from wgradcache.model.problem import ConvProblem
from wgradcache.pipeline.emulate import run_emulated

MFMA = ("gfx942", "gfx950")
# wg_K 200 = 7 tiles of 32 (the last partial): degree 7 gives 7 one-tile slices, 8 one empty
K7 = ConvProblem.parse("2,8,10,10,16,3,3,1,1")
K7G = ConvProblem.parse("2,16,10,10,16,3,3,1,1,1,2")  # the same per group, 2 groups
STEM = ConvProblem.parse("3,3,14,14,16,3,3,2,1")  # C=3: wg_N 27 (odd), wg_K 147
GEOMETRY = {"gfx942": (64, 64, 32, 2, 2), "gfx950": (64, 64, 64, 2, 2)}  # 2 k-steps each


def _geometry(target: str, p: ConvProblem) -> tuple[int, int, int, int, int]:
    """GEOMETRY, but tile_k 32 on gfx950 when the channels force narrow B loads (C=3, odd
    cpg): tile_k 64 at vec_b 1 is over gfx950's measured load bound."""
    g = GEOMETRY[target]
    return (64, 64, 32, 2, 2) if p.cpg % 4 and target == "gfx950" else g


def _run(spec, p, degree, dw, seed=0):
    r = run_emulated(spec, p, split_k=degree, seed=seed)
    assert r.plan.degree == degree and r.plan.reduction == spec.reduction
    assert r.plan.grid[2] == p.groups * degree
    check(r, dw)
    return r


@pytest.mark.parametrize("target", MFMA)
@pytest.mark.parametrize("dtype", ("fp16", "bf16"))
@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_unsplit_default_on_every_edge_problem(target, dtype, name):
    p = PROBLEMS[name]
    check(run_emulated(make_spec(target, dtype, _geometry(target, p), p), p), dtype)


@pytest.mark.parametrize("target", MFMA)
@pytest.mark.parametrize("degree", (1, 2, 3, 7, 8))
def test_packed_fp16_atomic_degrees_and_the_empty_slice(target, degree):
    spec = make_spec(target, "fp16", (32, 64, 32, 1, 2), K7, reduction="atomic")
    r = _run(spec, K7, degree, "fp16", seed=degree)
    assert r.plan.slice_k == {1: 224, 2: 128, 3: 96, 7: 32, 8: 32}[degree]


@pytest.mark.parametrize("target", MFMA)
@pytest.mark.parametrize("name, degree", [("partialMN", 1), ("3x3s1p1", 2), ("oddK", 3)])
def test_packed_bf16_atomic(target, name, degree):
    p = PROBLEMS[name]
    _run(make_spec(target, "bf16", _geometry(target, p), p, reduction="atomic"), p, degree,
         "bf16")


@pytest.mark.parametrize("target", MFMA)
@pytest.mark.parametrize("dtype", ("fp16", "bf16"))
@pytest.mark.parametrize("degree", (2, 7, 8))
def test_fp32_dw_atomic(target, dtype, degree):
    spec = make_spec(target, dtype, (64, 32, 32, 2, 1), K7, dw="fp32", reduction="atomic")
    _run(spec, K7, degree, "fp32", seed=degree)


@pytest.mark.parametrize("target", MFMA)
@pytest.mark.parametrize("degree", (3, 7))
def test_atomic_groups(target, degree):
    spec = make_spec(target, "fp16", (32, 32, 32, 1, 1), K7G, reduction="atomic")
    _run(spec, K7G, degree, "fp16")


@pytest.mark.parametrize("target", MFMA)
@pytest.mark.parametrize("dtype, name, vec", [("fp16", "partialMN", (8, 8)),
                                              ("bf16", "3x3s2", (4, 2)),
                                              ("fp16", "stem", (2, 1)),
                                              ("bf16", "dil2", (8, 8))])
def test_cshuffle_store(target, dtype, name, vec):
    p = PROBLEMS[name]
    spec = make_spec(target, dtype, _geometry(target, p), p, vec=vec, epilogue="cshuffle")
    check(run_emulated(spec, p), dtype)


@pytest.mark.parametrize("target", MFMA)
@pytest.mark.parametrize("dtype, dw, vec, degree", [("fp16", "fp16", (8, 8), 7),
                                                    ("bf16", "bf16", (4, 2), 2),
                                                    ("fp16", "fp32", (2, 4), 8),
                                                    ("bf16", "fp32", (8, 8), 3)])
def test_cshuffle_atomic(target, dtype, dw, vec, degree):
    spec = make_spec(target, dtype, (32, 64, 32, 1, 2), K7, dw=dw, vec=vec,
                     epilogue="cshuffle", reduction="atomic")
    _run(spec, K7, degree, dw)


@pytest.mark.parametrize("target", MFMA)
@pytest.mark.parametrize("dtype, dw", [("fp16", "fp16"), ("bf16", "bf16"), ("bf16", "fp32")])
@pytest.mark.parametrize("degree, replicas", [(1, 8), (3, 8), (7, 3), (9, 1)])
def test_two_stage_stem(target, dtype, dw, degree, replicas):
    """C=3: odd wg_N, no packed pair exists; replicas below the degree share slabs; degree
    9 over 5 K tiles leaves empty slices."""
    spec = make_spec(target, dtype, (64, 32, 32, 2, 1), STEM, dw=dw,
                     reduction="two_stage", ws_replicas=replicas)
    r = _run(spec, STEM, degree, dw)
    assert r.plan.workspace_bytes == replicas * 16 * 27 * 4


@pytest.mark.parametrize("target", MFMA)
def test_two_stage_groups(target):
    spec = make_spec(target, "bf16", GEOMETRY[target], K7G, reduction="two_stage",
                     ws_replicas=4)
    _run(spec, K7G, 7, "bf16")


@pytest.mark.parametrize("target, geometry", [
    ("gfx942", (256, 64, 32, 2, 2)), ("gfx942", (64, 256, 32, 2, 2)),
    ("gfx950", (128, 128, 32, 2, 2)), ("gfx950", (128, 128, 64, 2, 2)),
    ("gfx942", (32, 128, 32, 1, 4)), ("gfx950", (128, 32, 64, 2, 1))])
def test_wave64_ladder_geometries_on_every_edge_at_once(target, geometry):
    """The wave64 ladder's wide tiles and four-wave grids: wg_K 49, M 40, N 72, padding."""
    for dtype in ("fp16", "bf16"):
        check(run_emulated(make_spec(target, dtype, geometry, EDGE), EDGE), dtype)
