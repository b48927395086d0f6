"""Split-K policy: caps, the rounding-bound demonstration, fill / slice / override / explicit."""

from __future__ import annotations

import numpy as np
import pytest

from wgradcache.model.problem import ConvProblem
from wgradcache.model.spec import KernelSpec
from wgradcache.numerics.reference import round_to_dtype
from wgradcache.wgrad.capability import serves
from wgradcache.wgrad.split_k import (
    MAX_DEGREE,
    atomic_rounding_degree_cap,
    degree_cap,
    plan_split_k,
    slice_width,
)


def _spec(dw="fp16", red="atomic", dtype="fp16", tm=64, tn=64, tk=32, **kw):
    return KernelSpec("gfx1250", dtype, dw, tm, tn, tk, 2, 2, 8, 8, reduction=red, **kw)


def test_caps():
    assert atomic_rounding_degree_cap(10) == 97
    assert atomic_rounding_degree_cap(7) == 12
    assert degree_cap("fp16", "atomic") == 97
    assert degree_cap("bf16", "atomic") == 12
    assert degree_cap("fp32", "atomic") == MAX_DEGREE == 128
    assert degree_cap("fp16", "two_stage") == degree_cap("bf16", "two_stage") == 128
    assert degree_cap("fp16", "none") == 1


def _worst_case_error(degree: int, dtype: str) -> float:
    """One 1.0 partial then degree-1 partials of half an ulp, each add rounded to dtype."""
    half_ulp = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8}[dtype]
    if dtype == "fp16":
        acc = np.float16(0)
        for v in [1.0] + [half_ulp] * (degree - 1):
            acc = np.float16(acc + np.float16(v))  # packed fp16 atomic: rounds per add
        got = float(acc)
    else:
        acc = 0.0
        for v in [1.0] + [half_ulp] * (degree - 1):
            acc = float(round_to_dtype(np.array([acc + v]), "bf16")[0])
        got = acc
    exact = 1.0 + (degree - 1) * half_ulp
    return abs(got - exact) / exact


def test_rounding_bound_demonstration_fp16():
    assert _worst_case_error(128, "fp16") > 5e-2
    assert _worst_case_error(97, "fp16") <= 5e-2
    assert _worst_case_error(atomic_rounding_degree_cap(10), "fp16") <= 5e-2


def test_rounding_bound_demonstration_bf16():
    cap = atomic_rounding_degree_cap(7)
    assert _worst_case_error(cap, "bf16") <= 5e-2
    assert _worst_case_error(16, "bf16") > 5e-2


def test_slice_width_is_whole_tiles():
    assert slice_width(1000, 32, 1) == 1024
    assert slice_width(1000, 32, 3) == 352
    assert slice_width(1000, 32, 100) == 32  # more slices than tiles: one tile each
    for d in range(1, 40):
        w = slice_width(1000, 64, d)
        assert w % 64 == 0 and w * d >= 1000


# a pointwise layer with a long reduction and a one-CTA base grid: every cap binds in turn;
# wg_K = 32 * 97 * 128 * 3 splits into whole tiles at each cap (no slice to drop)
LONG = ConvProblem.parse(f"{32 * 97 * 128 * 3},16,1,1,16,1,1")


@pytest.mark.parametrize("dw, red, degree", [("fp16", "atomic", 97), ("bf16", "atomic", 12),
                                             ("fp32", "atomic", 128), ("fp16", "two_stage", 128),
                                             ("bf16", "two_stage", 128)])
def test_auto_capped_by_reduction(dw, red, degree):
    dtype = "bf16" if dw == "bf16" else "fp16"
    extra = {"ws_replicas": 8} if red == "two_stage" else {}
    plan = plan_split_k(_spec(dw, red, dtype, **extra), LONG)
    assert plan.source == "auto"
    assert plan.degree == degree
    assert plan.grid == (1, 1, degree)
    assert plan.slice_k * plan.degree >= LONG.wg_K > plan.slice_k * (plan.degree - 1)
    assert plan.workspace_bytes == (8 * 16 * 16 * 4 if red == "two_stage" else 0)


def test_auto_slices_no_shorter_than_512():
    p = ConvProblem.parse("4,16,32,32,16,1,1")  # wg_K = 4096
    plan = plan_split_k(_spec("fp32"), p)
    assert plan.degree == 8 and plan.slice_k == 512


def test_auto_fill_1024_and_2048_grouped():
    # 512x512 GEMM on 64x64 tiles = 64 CTAs; fill 1024 -> 16
    p = ConvProblem.parse("64,512,16,16,512,1,1")
    assert plan_split_k(_spec("fp32"), p).degree == 16
    # grouped: 2 groups of 256x256 = 32 CTAs; fill 2048 -> 64
    g = ConvProblem.parse("128,512,16,16,512,1,1,1,0,1,2")
    plan = plan_split_k(_spec("fp32"), g)
    assert plan.degree == 64 and plan.grid == (4, 4, 128)


def test_auto_no_empty_slices():
    p = ConvProblem.parse("1,16,40,40,16,1,1")  # wg_K = 1600 -> at most 3 slices of 512+
    plan = plan_split_k(_spec("fp32", tk=64), p)
    assert plan.degree == 3 and plan.slice_k == 576
    assert (plan.degree - 1) * plan.slice_k < p.wg_K


def test_override_held_or_moved():
    s = _spec("fp16")
    assert plan_split_k(s, LONG, override=200).degree == 128
    assert plan_split_k(s, LONG, override=200).reduction == "atomic"
    moved = plan_split_k(s, LONG, override=200, free_reduction=True)
    assert (moved.degree, moved.reduction, moved.ws_replicas) == (200, "two_stage", 8)
    assert moved.workspace_bytes == 8 * 16 * 16 * 4
    assert plan_split_k(s, LONG, override=100).degree == 100  # under 128: kept
    assert plan_split_k(_spec("fp32"), LONG, override=300).degree == 300


def test_explicit_kept_and_bounded_by_grid_z():
    s = _spec("fp16")
    plan = plan_split_k(s, LONG, split_k=500)
    assert (plan.degree, plan.source, plan.grid[2]) == (500, "explicit", 500)
    small = ConvProblem.parse("1,16,4,4,16,1,1")  # 16 K elements, one tile: 6 empty slices
    plan = plan_split_k(s, small, split_k=7)
    assert plan.degree == 7 and plan.slice_k == 32
    g = ConvProblem.parse("1,64,4,4,64,1,1,1,0,1,4")
    assert plan_split_k(_spec("fp32"), g, split_k=16383).grid[2] == 65532
    with pytest.raises(ValueError, match="gridDim.z = groups 4 x split 16384 exceeds 65535"):
        plan_split_k(_spec("fp32"), g, split_k=16384)


def test_no_reduction_is_degree_one():
    s = _spec("fp16", "none")
    assert plan_split_k(s, LONG).degree == 1
    assert plan_split_k(s, LONG).slice_k == LONG.wg_K
    with pytest.raises(ValueError, match="no split-K reduction"):
        plan_split_k(s, LONG, split_k=2)


def test_serves_rules():
    s = _spec("fp16", "none")
    assert serves(s, ConvProblem.parse("1,16,8,8,16,3,3,1,1")) == (True, "")
    ok, why = serves(s, ConvProblem.parse("1,12,8,8,16,3,3,1,1"))
    assert not ok and why == "vec_b 8 does not divide cpg=12"
    ok, why = serves(s, ConvProblem.parse("1,16,8,8,12,3,3,1,1"))
    assert not ok and why == "vec_a 8 does not divide kpg=12"
    stem = KernelSpec("gfx1250", "fp16", "fp16", 64, 64, 32, 2, 2, 8, 1, reduction="atomic")
    ok, why = serves(stem, ConvProblem.parse("1,3,8,8,16,3,3,1,1"))
    assert not ok and "wg_N=Y*X*cpg=27 is odd" in why
    f32 = KernelSpec("gfx1250", "fp16", "fp32", 64, 64, 32, 2, 2, 8, 1, reduction="atomic")
    assert serves(f32, ConvProblem.parse("1,3,8,8,16,3,3,1,1")) == (True, "")
    asy = KernelSpec("gfx1250", "fp16", "fp16", 64, 64, 32, 2, 2, chunk_a=16, chunk_b=8,
                     k_loop="async")
    assert serves(asy, ConvProblem.parse("1,4,8,8,8,3,3,1,1"))[0]
    ok, why = serves(asy, ConvProblem.parse("1,6,8,8,8,3,3,1,1"))
    assert not ok and why == "async chunk_b of 8 B (4 elements) does not divide cpg=6"
    ok, why = serves(s, ConvProblem.parse("1,16,8,8,16,3,3,1,1"), degree=2)
    assert not ok and "needs a split-K kernel" in why
    ok, why = serves(_spec("fp32"), ConvProblem.parse("1,64,4,4,64,1,1,1,0,1,8"), degree=9000)
    assert not ok and "gridDim.z = groups 8 x split 9000 = 72000 exceeds 65535" in why
    ok, why = serves(s, ConvProblem.parse("1024,64,256,256,64,1,1"))
    assert not ok and "dy is 8589934592 B" in why
    bad = KernelSpec("gfx1250", "fp16", "fp16", 64, 64, 32, 2, 2, 3, 8)
    assert serves(bad, ConvProblem.parse("1,16,8,8,16,3,3,1,1"))[1].startswith("invalid kernel")


def test_xcd_snap_on_the_eight_xcd_mfma_targets():
    """wg_K 10752 (21 slices of 512) over 3 N tiles: 21 on one-XCD gfx1250; a multiple of
    8 / gcd(3, 8) = 8 on gfx942 / gfx950 (MI300X / MI355X: 8 XCDs)."""
    from wgradcache.wgrad.split_k import xcd_snap

    p = ConvProblem.parse("42,192,16,16,64,1,1")  # wg_M 64, wg_N 192, wg_K 42*256
    assert plan_split_k(_spec("fp16", tn=64), p).degree == 21
    for target in ("gfx942", "gfx950"):
        spec = KernelSpec(target, "fp16", "fp16", 64, 64, 32, 2, 2, 8, 8, reduction="atomic")
        plan = plan_split_k(spec, p)
        assert (plan.degree, plan.slice_k, plan.grid) == (16, 672, (3, 1, 16))
    # base 2: step 4; below a step rounds up, unless that passes a cap
    assert [xcd_snap(d, 2, 8, 97) for d in (1, 3, 5, 21)] == [4, 4, 4, 20]
    assert xcd_snap(3, 2, 8, 3) == 3 and xcd_snap(21, 8, 8, 97) == 21
    assert xcd_snap(21, 3, 1, 97) == 21
