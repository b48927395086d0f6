"""The direct small-C kernel (groups = 1, C <= its compiled channels) in the emulator
against float64 on its edges: every C from 1 to Cc, a partial last K block, reduction
tails and split slices (a partial last one, an empty last one; degrees 1, 2, 3, 7), stride
2, padding, dilation, a filter smaller than the compiled taps (1x1, 1x3, 2x3), 3x3, 5x5,
batch 1, an odd C·Y·X, fp16, bf16 and fp32 dW, none and atomic; every walked small-C
kernel on every target that walks one; and the rules that say which kernel, problem and
degree it takes."""

from __future__ import annotations

import dataclasses

import pytest
from wgrad_cases import assert_planted_pixel_shift_caught, check, shipped_limits

from wgradcache.jobs import default_jobdata
from wgradcache.jobs.walk import small_c_jobs
from wgradcache.model.problem import ConvProblem
from wgradcache.model.spec import (
    DTYPE_KEYS,
    VARIANT_KEYS,
    KernelSpec,
    from_label,
    lds_bytes,
    parse_dtype_key,
    validate,
)
from wgradcache.model.targets import get_target, kernel_target_names
from wgradcache.pipeline.emulate import run_emulated
from wgradcache.pipeline.verify_numerics import probe_problem, split_probe
from wgradcache.wgrad.capability import serves
from wgradcache.wgrad.split_k import plan_split_k

P = ConvProblem.parse


def _spec(target: str, taps: int, chans: int, tile_n: int, tile_k: int, vec: int,
          reduction: str, dtype: str = "fp16", dw: str | None = None) -> KernelSpec:
    waves = tile_n // vec * tile_k // get_target(target).wave_size
    spec = from_label(f"{target}-{dtype}{'-dw' + dw if dw else ''}-t{taps}x{tile_n}x{tile_k}"
                      f"-w{waves}x1-v{vec}x{chans}-small_c-default-{reduction}")
    ok, why = validate(spec, limits=shipped_limits(target))
    assert ok, f"{spec.label()}: {why}"
    return spec


# (problem, split degree or None for the policy's) on a 3x3 C 3 kernel of 16 channels per
# CTA and 16 positions per step: K 34 = two blocks of 16 + 2, wg_K 2·5·5 = 50 = 3 steps
# of 16 + 2; degree 2 ends on a partial step, 7 leaves the last slices empty
EDGES = {
    "c3_stem": (P("2,3,9,9,34,3,3,2,1"), None),
    "c2": (P("2,2,9,9,34,3,3,2,1"), 2),
    "c1_split3": (P("2,1,9,9,34,3,3,2,1"), 3),
    "empty_slices": (P("2,3,9,9,34,3,3,2,1"), 7),
    "dilation2": (P("1,3,11,10,18,3,3,1,2,2"), 2),
    "1x1": (P("1,3,7,8,18,1,1"), None),
    "1x3": (P("2,3,6,7,18,1,3,1,1"), None),
    "2x3_odd": (P("1,3,7,7,18,2,3,1,0"), 3),  # C·Y·X = 18, K·C·Y·X even
}


@pytest.mark.parametrize("target", ("sm_90", "gfx1250", "gfx942"))
@pytest.mark.parametrize("edge", sorted(EDGES))
def test_3x3_kernel_on_its_edges(target, edge):
    problem, degree = EDGES[edge]
    spec = _spec(target, 3, 3, 16, 16, 1, "atomic")
    r = run_emulated(spec, problem, split_k=degree, seed=len(edge))
    check(r, "fp16")
    if degree is not None:
        assert r.plan.degree == degree and r.plan.grid == (-(-problem.K // 16), 1, degree)


def test_empty_last_slices_are_empty():
    """Degree 7 over 162 positions in steps of 16: slices of 32, the seventh past wg_K."""
    problem, degree = EDGES["empty_slices"]
    plan = plan_split_k(_spec("sm_90", 3, 3, 16, 16, 1, "atomic"), problem, split_k=degree)
    assert (problem.wg_K, plan.slice_k, plan.slice_k * (degree - 1) >= problem.wg_K) == (
        50, 16, True)


@pytest.mark.parametrize("case", [
    # a C 4 kernel on C 4, 3 and 1; vec 2 and 4 (the dY vector); 5x5 on 5x5 and on 3x3
    ("sm_90", 3, 4, 16, 16, 2, "atomic", "fp16", None, "2,4,9,9,36,3,3,2,1", 3),
    ("gfx1250", 3, 4, 16, 16, 1, "none", "bf16", None, "1,3,8,9,18,3,3,1,1", None),
    ("gfx942", 3, 4, 16, 16, 2, "atomic", "bf16", "fp32", "2,1,9,9,20,3,3,2,1", 2),
    ("sm_90", 3, 3, 16, 32, 4, "atomic", "bf16", None, "2,3,9,9,40,3,3,2,1", 7),
    ("gfx1201", 3, 3, 16, 32, 2, "none", "fp16", None, "1,3,10,10,22,3,3,1,1,1", None),
    ("gfx950", 5, 3, 16, 8, 1, "atomic", "fp16", "fp32", "1,3,11,12,18,5,5,2,2", 2),
    ("gfx1151", 3, 3, 32, 8, 1, "none", "fp16", None, "2,2,9,9,34,3,3,2,1", None),
    ("gfx1151", 3, 3, 16, 16, 1, "atomic", "bf16", "fp32", "1,3,9,9,17,3,3,1,1", 3),
    ("sm_90", 5, 3, 16, 8, 1, "none", "bf16", "fp32", "1,2,9,9,18,3,3,1,2,2", None),
], ids=lambda c: f"{c[0]}-t{c[1]}c{c[2]}-v{c[5]}-{c[6]}-{c[7]}{c[8] or ''}-{c[9]}@{c[10]}")
def test_other_shapes_dtypes_and_reductions(case):
    *shape, dtype, dw, problem, degree = case
    spec = _spec(*shape, dtype=dtype, dw=dw)
    check(run_emulated(spec, P(problem), split_k=degree, seed=1), dw or dtype)


def _walked() -> list[KernelSpec]:
    data = default_jobdata()
    return [s for t in kernel_target_names() for key in DTYPE_KEYS
            for s in small_c_jobs(data, get_target(t), *parse_dtype_key(key), VARIANT_KEYS)]


def test_the_walk_emits_every_dtype_and_both_reductions():
    """What the numerics below cover: fp16, bf16 and their fp32-dW twins, none and atomic."""
    walked = _walked()
    assert {(s.dtype, s.dw_dtype, s.reduction) for s in walked} == {
        (d, w, r) for d in ("fp16", "bf16") for w in (d, "fp32") for r in ("none", "atomic")}


@pytest.mark.parametrize("spec", [s for s in _walked() if s.target in ("sm_90", "gfx1151")
                                  or s.dtype == "fp16"], ids=KernelSpec.label)
def test_every_walked_small_c_kernel_on_its_probe(spec):
    """Every small-C kernel the walk yields (every dtype on sm_90 and gfx1151, fp16
    elsewhere) on the problem verify gives an unsplit entry (batch 1, stride 2, C one below
    its channels, its step tail, its partial K block), split 2 where it can (not bf16's
    packed atomic, whose two roundings take the bound past the test's 1e-2)."""
    split = spec.reduction == "atomic" and spec.dw_dtype != "bf16"
    r = run_emulated(spec, probe_problem(spec), split_k=2 if split else None)
    check(r, spec.dw_dtype)


def test_probes_hit_the_edges():
    spec = _spec("sm_90", 3, 3, 16, 16, 1, "atomic")
    p, q = probe_problem(spec), split_probe(spec)
    assert (p.short(), p.Ho, p.wg_K % spec.tile_k, p.K % spec.tile_n) == (
        "1,2,13,13,18,3,3,2,1", 7, 1, 2)
    assert (q.short(), q.wg_K % spec.tile_k, plan_split_k(spec, q).degree) == (
        "1,2,65,65,18,3,3,2,1", 1, 2)


def test_a_planted_channel_offset_is_caught(monkeypatch):
    """Every pixel one channel on (its c + 1): the comparison fails far outside its bound."""
    assert_planted_pixel_shift_caught(monkeypatch, _spec("sm_90", 3, 3, 16, 16, 1, "none"),
                                      EDGES["c3_stem"][0], 0, 1)


def test_label_round_trips_and_names_the_shape():
    spec = _spec("sm_90", 3, 3, 16, 32, 2, "atomic")
    assert spec.label() == "sm_90-fp16-t3x16x32-w8x1-v2x3-small_c-default-atomic"
    assert (from_label(spec.label()), spec.block_size, spec.variant, lds_bytes(spec)) == (
        spec, 256, "small_c.default.atomic", 27 * 32 * 16 * 4)
    # no IDENTITY_DEFAULTS field: a small-C identity names exactly the spec's fields
    assert set(spec.canonical()) == {"schema", *(f.name for f in dataclasses.fields(spec))} - {
        "cta_group", "stages", "wo_run"}


# the base every change edits: 3x3 C 4, 16 k per CTA at vec 1, 8 rows (128 threads, 36
# accumulators: within gfx1201's 64)
BASE_1201 = "gfx1201-fp16-t3x16x8-w4x1-v1x4-small_c-default-atomic"


@pytest.mark.parametrize("change,why", [
    (dict(tile_m=10), "small-C filter side 10 outside [1, 9]"),
    (dict(tile_m=0), "small-C filter side 0 outside [1, 9]"),
    (dict(vec_b=5), "small-C channel count vec_b 5 outside [1, 4]"),
    (dict(vec_b=-1), "small-C channel count vec_b -1 outside [1, 4]"),
    (dict(vec_a=3), "small-C dY vector vec_a 3 not one of (1, 2, 4, 8)"),
    (dict(vec_a=8, tile_n=12), "vec_a 8 does not divide the channel block 12"),
    (dict(tile_n=-16), "vec_a 1 does not divide the channel block -16"),
    (dict(tile_k=0), "vec_a 1 does not divide the channel block 16"),
    (dict(warp_m=2), "a small-C block is tile_n / vec_a x tile_k = 128 threads: warp_m x "
                     "warp_n must be 4 x 1"),
    (dict(warp_n=2, warp_m=2), "a small-C block is tile_n / vec_a x tile_k = 128 threads: "
                               "warp_m x warp_n must be 4 x 1"),
    (dict(epilogue="cshuffle"), "the small-C kernel has the default epilogue, the row-major "
                                "CTA order and no async chunks"),
    (dict(cta_group=8), "the small-C kernel has the default epilogue, the row-major CTA "
                        "order and no async chunks"),
    (dict(chunk_a=16), "the small-C kernel has the default epilogue, the row-major CTA "
                       "order and no async chunks"),
    (dict(stages=3), "the small-C kernel has no async ring: stages 3 is not 2"),
    (dict(reduction="two_stage", ws_replicas=8),
     "the small-C kernel reduces by atomics (no two-stage workspace)"),
    (dict(ws_replicas=8), "the small-C kernel reduces by atomics (no two-stage workspace)"),
    (dict(reduction="sideways"), "reduction 'sideways' not one of ('none', 'atomic', "
                                 "'two_stage')"),
    (dict(tile_k=32, warp_m=16), "block size 512 over 256"),
    (dict(tile_k=10 ** 6, warp_m=500000), "block size 16000000 over 256"),
    (dict(tile_m=5), "100 accumulator registers per lane exceed the budget 64"),
    (dict(dtype="fp32", dw_dtype="fp32"), "dtype 'fp32' not one of ('fp16', 'bf16')"),
])
def test_validate_names_what_a_small_c_spec_breaks(change, why):
    spec = dataclasses.replace(from_label(BASE_1201), **change)
    assert validate(spec, limits=shipped_limits("gfx1201")) == (False, why)


def test_validate_without_budgets_and_the_lds_bound():
    """The budgets are the walk's (100 accumulators spill, they do not compute wrong);
    the LDS is the target's: 5x5 C 4 at 64 rows of 16 k is 409600 B."""
    spec = dataclasses.replace(from_label(BASE_1201), tile_m=5)
    assert validate(spec, limits=None) == (True, "")
    big = dataclasses.replace(spec, tile_k=16, warp_m=8)
    assert validate(big, limits=None) == (False, "LDS 102400 B (small-C reduction) exceeds "
                                                 "gfx1201's 65536 B")


def test_packed_atomic_needs_an_even_channel_block_and_gfx1151_none():
    odd = from_label("gfx1250-fp16-t3x1x32-w1x1-v1x3-small_c-default-atomic")
    assert validate(odd, limits=None) == (False, "packed fp16 atomics write dword pairs of "
                                                 "dW: the channel block 1 is odd")
    pk = from_label("gfx1151-fp16-t3x32x8-w8x1-v1x3-small_c-default-atomic")
    assert validate(pk, limits=None) == (False, "gfx1151 lowers <2 x fp16> atomics to a "
                                                "compare-and-swap loop: no 16-bit atomic "
                                                "split-K")


@pytest.mark.parametrize("problem,degree,why", [
    ("2,6,9,9,32,3,3,1,1,1,2", None, "the small-C kernel needs groups = 1 (got groups=2)"),
    ("2,3,9,9,3,3,3,1,1,1,3", None, "the small-C kernel needs groups = 1 (got groups=3)"),
    ("2,4,9,9,32,3,3,2,1", None, "C=4 exceeds the kernel's 3 channels"),
    ("2,64,9,9,32,3,3,2,1", None, "C=64 exceeds the kernel's 3 channels"),
    ("2,3,9,9,32,5,3,2,1", None, "filter 5x3 exceeds the kernel's 3x3 taps"),
    ("2,3,9,9,32,3,4,2,1", None, "filter 3x4 exceeds the kernel's 3x3 taps"),
    ("2,3,9,9,33,3,3,2,1", None, "vec_a 2 does not divide K=33"),
    ("2,3,9,9,32,3,3,2,1", 65536, "gridDim.z = split 65536 exceeds 65535"),
    ("40000,3,200,200,32,3,3,1,1", None, "dy is 102400000000 B: offsets are 31-bit (at most "
                                         "2147483647 B per buffer)"),
])
def test_serves_refuses_what_the_kernel_cannot_compute(problem, degree, why):
    assert serves(_spec("sm_90", 3, 3, 16, 32, 2, "atomic"), P(problem), degree) == (
        False, why)


def test_serves_packed_atomic_needs_even_runs_and_none_no_split():
    """K·C·Y·X odd (K 33, 3x3 of C 3): a dword pair would cross the last CTA's run; K even
    or C·Y·X even keeps every run even (MobileNetV2's K 32 x 27 is served)."""
    v1 = _spec("sm_90", 3, 3, 16, 16, 1, "atomic")
    assert serves(v1, P("2,3,9,9,33,3,3,2,1")) == (
        False, "packed fp16 atomics write dword pairs: K*C*Y*X=891 is odd")
    assert serves(v1, P("2,3,9,9,32,3,3,2,1")) == (True, "")
    assert serves(v1, P("2,2,9,9,33,3,3,2,1")) == (True, "")  # C·Y·X 18 even
    f32 = _spec("sm_90", 3, 3, 16, 16, 1, "atomic", dw="fp32")
    assert serves(f32, P("2,3,9,9,33,3,3,2,1")) == (True, "")
    assert serves(_spec("sm_90", 3, 3, 16, 16, 1, "none"), P("2,3,9,9,33,3,3,2,1"), 2) == (
        False, "split degree 2 needs a split-K kernel (reduction is none)")


def test_only_stems_are_served():
    """A GEMM layer (C 64), a depthwise one and a grouped one are not the small-C
    kernel's; the depthwise kernel does not take a stem."""
    spec = _spec("sm_90", 3, 4, 16, 16, 1, "atomic")
    dw = from_label("sm_90-fp16-t3x64x4-w4x1-v2x2-depthwise-default-atomic")
    assert not serves(spec, P("2,64,9,9,64,3,3,1,1"))[0]
    assert not serves(spec, P("2,4,9,9,4,3,3,1,1,1,4"))[0]
    assert serves(dw, P("2,4,9,9,32,3,3,1,1")) == (
        False, "the depthwise kernel needs groups = C = K (got groups=1, C=4, K=32)")


def test_policy_grid_is_k_blocks_by_the_split():
    """MobileNetV2's stem (K 32, wg_K 802816): two blocks of 16 k, the fp16 packed
    atomic's rounding cap (97) as the degree; bf16's is 12, fp32 dW's 128; the unsplit
    kernel runs one slice."""
    p = P("64,3,224,224,32,3,3,2,1")
    got = {d: plan_split_k(_spec("sm_90", 3, 3, 16, 16, 1, "atomic", dtype=d[0], dw=d[1]), p)
           for d in (("fp16", None), ("bf16", None), ("bf16", "fp32"))}
    assert {d: (pl.degree, pl.grid) for d, pl in got.items()} == {
        ("fp16", None): (97, (2, 1, 97)), ("bf16", None): (12, (2, 1, 12)),
        ("bf16", "fp32"): (128, (2, 1, 128))}
    one = plan_split_k(_spec("sm_90", 3, 3, 16, 16, 1, "none"), p)
    assert (one.degree, one.grid, one.slice_k) == (1, (2, 1, 1), 802816)
