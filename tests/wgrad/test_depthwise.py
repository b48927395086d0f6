"""The direct depthwise kernel (groups = C = K) in the emulator against float64 on its edges:
a partial last channel block, reduction tails and split slices (an empty last one), stride
2, padding, dilation, a filter smaller than the compiled taps (1x1, 1x3), 3x3, 5x5, 7x7,
batch 1, an odd C; every walked depthwise kernel on every target that walks one; and the
rules that say which kernel, problem and degree it takes."""

from __future__ import annotations

import dataclasses

import pytest
from wgrad_cases import assert_planted_pixel_shift_caught, check, shipped_limits

from wgradcache.jobs import default_jobdata
from wgradcache.jobs.walk import depthwise_jobs
from wgradcache.model.problem import ConvProblem
from wgradcache.model.spec import VARIANT_KEYS, KernelSpec, from_label, validate
from wgradcache.model.targets import get_target, kernel_target_names
from wgradcache.pipeline.emulate import run_emulated
from wgradcache.pipeline.verify_numerics import probe_problem, split_probe
from wgradcache.wgrad.capability import serves
from wgradcache.wgrad.split_k import plan_split_k

P = ConvProblem.parse
# (problem, split degree or None for the policy's); C 70 = a 64 block + 6, wg_K 162 = 40
# steps of 4 + 2: degree 3 ends on a partial step, 8 leaves the last slice empty
EDGES_T3 = {
    "chan_tail": (P("2,70,9,9,70,3,3,1,1,1,70"), None),
    "split3": (P("2,70,9,9,70,3,3,1,1,1,70"), 3),
    "empty_slice": (P("2,70,9,9,70,3,3,1,1,1,70"), 8),
    "stride2_batch1": (P("1,66,11,10,66,3,3,2,1,1,66"), None),
    "dilation2": (P("2,68,9,9,68,3,3,1,2,2,68"), 2),
    "rs1": (P("1,66,7,8,66,1,1,1,0,1,66"), None),
    "1x3": (P("2,66,8,9,66,1,3,1,1,1,66"), None),
}


def _spec(target: str, taps: int, tile_n: int, tile_k: int, vec: int, reduction: str,
          dtype: str = "fp16", dw: str | None = None) -> KernelSpec:
    wsr = "-wsr8" if reduction == "two_stage" else ""
    label = (f"{target}-{dtype}{'-dw' + dw if dw else ''}-t{taps}x{tile_n}x{tile_k}"
             f"-w{{}}x1-v{vec}x{vec}-depthwise-default-{reduction}{wsr}")
    spec = from_label(label.format(tile_n // vec * tile_k // get_target(target).wave_size))
    ok, why = validate(spec, limits=shipped_limits(target))
    assert ok, f"{spec.label()}: {why}"
    return spec


@pytest.mark.parametrize("target", ("sm_90", "gfx1250", "gfx942"))
@pytest.mark.parametrize("edge", sorted(EDGES_T3))
def test_3x3_kernel_on_its_edges(target, edge):
    problem, degree = EDGES_T3[edge]
    spec = _spec(target, 3, 64, 4, 2, "atomic")
    r = run_emulated(spec, problem, split_k=degree, seed=len(edge))
    check(r, "fp16")
    if degree is not None:
        assert r.plan.degree == degree and r.plan.grid == (-(-problem.C // 64), 1, degree)


def test_empty_last_slice_is_empty():
    """Degree 8 over 41 steps of 4: slices of 6 steps, the eighth starts past wg_K."""
    problem, degree = EDGES_T3["empty_slice"]
    plan = plan_split_k(_spec("sm_90", 3, 64, 4, 2, "atomic"), problem, split_k=degree)
    assert (plan.slice_k, plan.slice_k * (degree - 1) >= problem.wg_K) == (24, True)


@pytest.mark.parametrize("case", [
    ("sm_90", 5, 64, 4, 2, "atomic", "fp16", None, "2,70,11,10,70,5,5,2,2,1,70", 7),
    ("gfx1250", 5, 64, 2, 1, "none", "bf16", None, "1,66,13,13,66,3,3,1,2,2,66", None),
    ("gfx950", 7, 64, 2, 1, "atomic", "bf16", "fp32", "1,66,10,10,66,7,7,1,3,1,66", 2),
    ("gfx1201", 7, 64, 2, 1, "atomic", "fp16", None, "1,66,9,9,66,7,7,1,2,1,66", None),
    ("gfx1151", 3, 32, 4, 1, "none", "fp16", None, "2,37,6,7,37,3,3,1,1,1,37", None),
    ("sm_90", 3, 32, 4, 1, "atomic", "fp16", "fp32", "2,37,6,7,37,3,3,2,1,1,37", 3),
    # the 256-thread entries: 16-channel blocks with a partial one (38 = 2 x 16 + 6), 16
    # and 32 rows a step with a tail (162 = 10 x 16 + 2), slices past wg_K (49 at degree 7)
    ("sm_90", 3, 16, 16, 1, "atomic", "fp16", None, "2,38,9,9,38,3,3,1,1,1,38", 3),
    ("gfx1250", 3, 16, 32, 2, "atomic", "bf16", "fp32", "1,34,13,13,34,3,3,2,1,1,34", 7),
    ("gfx942", 3, 32, 8, 1, "none", "fp16", None, "2,33,9,9,33,3,3,1,1,1,33", None),
    ("sm_90", 5, 32, 8, 1, "atomic", "fp16", None, "1,40,12,12,40,5,5,1,2,1,40", 2),
    # 4-channel vectors, 64 rows a step (2 steps and a tail of 34), a partial 4-vector block
    ("gfx950", 3, 16, 64, 4, "atomic", "fp16", None, "2,36,9,9,36,3,3,1,1,1,36", 2),
    ("sm_90", 3, 32, 32, 4, "atomic", "bf16", "fp32", "1,44,12,12,44,3,3,1,1,1,44", 3),
    ("gfx1201", 5, 16, 16, 2, "none", "bf16", None, "1,18,11,11,18,5,5,1,2,1,18", None),
    # 5x5 at 4-channel vectors (100 accumulators) and 3x3 at 8-channel (16-byte) ones: a
    # partial vector block (C 40 = 2 x 16 + 8; 24 = 16 + 8), tails of 16 and 32 rows a step,
    # stride 2, dilation, slices past wg_K (degree 7 over 4 steps)
    ("sm_90", 5, 16, 32, 4, "atomic", "fp16", None, "1,40,12,12,40,5,5,1,2,1,40", 7),
    ("gfx950", 5, 32, 16, 4, "atomic", "bf16", "fp32", "2,36,13,12,36,5,5,2,2,1,36", 3),
    ("gfx1250", 5, 16, 32, 4, "two_stage", "bf16", None, "1,20,11,11,20,5,5,1,4,2,20", 2),
    ("sm_90", 3, 16, 64, 8, "two_stage", "fp16", None, "2,24,9,9,24,3,3,1,1,1,24", 3),
    ("gfx942", 3, 32, 32, 8, "atomic", "fp16", None, "1,40,14,13,40,3,3,2,2,2,40", 2),
    ("sm_90", 3, 32, 32, 8, "none", "bf16", None, "1,72,11,11,72,3,3,1,1,1,72", None),
    # two-stage (16-bit dW): f32 adds into slab (channel, z mod 8); degree 11 wraps the
    # replicas, 19 leaves slices empty (162 = 19 x 9 - 9), a partial channel block
    ("sm_90", 3, 64, 4, 2, "two_stage", "bf16", None, "2,70,9,9,70,3,3,1,1,1,70", 3),
    ("sm_90", 3, 16, 64, 4, "two_stage", "bf16", None, "2,36,9,9,36,3,3,1,1,1,36", 11),
    ("gfx1250", 3, 16, 16, 1, "two_stage", "fp16", None, "2,38,9,9,38,3,3,1,1,1,38", 19),
    ("gfx942", 5, 16, 16, 2, "two_stage", "bf16", None, "1,40,12,12,40,5,5,1,2,1,40", None),
    ("gfx950", 7, 64, 2, 1, "two_stage", "fp16", None, "1,66,10,10,66,7,7,2,3,1,66", 2),
], ids=lambda c: f"{c[0]}-t{c[1]}-v{c[4]}-{c[5]}-{c[6]}{c[7] or ''}-{c[8]}@{c[9]}")
def test_other_filters_dtypes_and_reductions(case):
    *shape, dtype, dw, problem, degree = case
    spec = _spec(*shape, dtype=dtype, dw=dw)
    r = run_emulated(spec, P(problem), split_k=degree, seed=1)
    check(r, dw or dtype)
    assert r.plan.reduction == spec.reduction
    if degree is not None:
        assert r.plan.degree == degree


def _walked(dtype: str) -> list[KernelSpec]:
    data = default_jobdata()
    return [s for t in kernel_target_names()
            for s in depthwise_jobs(data, get_target(t), dtype, dtype, VARIANT_KEYS)]


@pytest.mark.parametrize("spec", _walked("fp16"), ids=KernelSpec.label)
def test_every_walked_depthwise_kernel_on_its_probe(spec):
    """Every depthwise kernel the default walk yields (fp16, every target) on the problem
    verify gives an unsplit entry (batch 1, its step tail, its partial channel block),
    split 2 where it can."""
    r = run_emulated(spec, probe_problem(spec), split_k=2 if spec.reduction == "atomic" else None)
    check(r, "fp16")


def test_split_probe_splits_with_a_tail():
    spec = _spec("sm_90", 7, 64, 2, 1, "atomic")
    p = split_probe(spec)
    assert (p.short(), p.wg_K % spec.tile_k, plan_split_k(spec, p).degree) == (
        "1,66,33,33,66,3,3,1,1,1,66", 1, 2)


def test_a_planted_tap_offset_is_caught(monkeypatch):
    """Every tap one pixel row down (ho·s + 1 − p + y·d): the comparison fails far outside
    its bound."""
    assert_planted_pixel_shift_caught(monkeypatch, _spec("sm_90", 3, 64, 4, 2, "none"),
                                      EDGES_T3["chan_tail"][0], 1, 0)


def test_label_round_trips_and_names_the_shape():
    spec = _spec("gfx942", 3, 64, 4, 2, "atomic")
    assert spec.label() == "gfx942-fp16-t3x64x4-w2x1-v2x2-depthwise-default-atomic"
    assert (from_label(spec.label()), spec.block_size, spec.variant) == (
        spec, 128, "depthwise.default.atomic")


@pytest.mark.parametrize("change,why", [
    (dict(tile_m=10), "depthwise filter side 10 outside [1, 9]"),
    (dict(vec_a=1), "depthwise vec pair (1, 2): one channel width of (1, 2, 4, 8) for dY and X"),
    (dict(warp_m=2), "a depthwise block is tile_n / vec_b x tile_k = 128 threads: warp_m x "
                     "warp_n must be 4 x 1"),
    (dict(epilogue="cshuffle"), "the depthwise kernel has the default epilogue, the row-major "
                                "CTA order and no async chunks"),
    (dict(reduction="two_stage", ws_replicas=8),
     "gfx1201: float atomics not validated for two-stage split-K"),
    (dict(reduction="two_stage", ws_replicas=8, dw_dtype="fp32"),
     "an f32 dW takes the depthwise kernel's f32 atomics in place: a two-stage workspace "
     "adds nothing"),
    (dict(ws_replicas=8), "ws_replicas belongs to two-stage split-K"),
    (dict(reduction="two_stage"), "ws_replicas 0 must be >= 1 for two-stage"),
    (dict(tile_n=128, warp_m=16, vec_a=1, vec_b=1), "block size 512 over 256"),
    (dict(tile_m=7), "98 accumulator registers per lane exceed the budget 64"),
])
def test_validate_names_what_a_depthwise_spec_breaks(change, why):
    spec = dataclasses.replace(_spec("gfx1201", 3, 64, 4, 2, "atomic"), **change)
    assert validate(spec, limits=shipped_limits("gfx1201")) == (False, why)


def test_packed_atomic_needs_an_even_channel_block_and_gfx1151_none():
    odd = from_label("gfx1250-fp16-t3x1x32-w1x1-v1x1-depthwise-default-atomic")
    assert validate(odd, limits=None) == (False, "packed fp16 atomics write dword pairs of "
                                                 "dW: the channel block 1 is odd")
    pk = from_label("gfx1151-fp16-t3x64x4-w4x1-v2x2-depthwise-default-atomic")
    assert validate(pk, limits=None) == (False, "gfx1151 lowers <2 x fp16> atomics to a "
                                                "compare-and-swap loop: no 16-bit atomic "
                                                "split-K")


@pytest.mark.parametrize("problem,why", [
    ("2,64,9,9,64,3,3", "the depthwise kernel needs groups = C = K (got groups=1, C=64, "
                        "K=64)"),
    ("2,64,9,9,128,3,3,1,1,1,64", "the depthwise kernel needs groups = C = K (got "
                                  "groups=64, C=64, K=128)"),
    ("2,64,9,9,64,5,3,1,1,1,64", "filter 5x3 exceeds the kernel's 3x3 taps"),
    ("2,63,9,9,63,3,3,1,1,1,63", "vec_b 2 does not divide C=63"),
])
def test_serves_refuses_what_the_kernel_cannot_compute(problem, why):
    assert serves(_spec("sm_90", 3, 64, 4, 2, "atomic"), P(problem)) == (False, why)


def test_serves_packed_atomic_needs_even_dw_and_none_no_split():
    v1 = _spec("sm_90", 3, 32, 4, 1, "atomic")
    assert serves(v1, P("2,37,9,9,37,3,3,1,1,1,37")) == (
        False, "packed fp16 atomics write dword pairs: C*Y*X=333 is odd")
    assert serves(_spec("sm_90", 3, 32, 4, 1, "none"), P("2,37,9,9,37,3,3,1,1,1,37"), 2) == (
        False, "split degree 2 needs a split-K kernel (reduction is none)")


def test_policy_grid_is_channel_blocks_by_the_split():
    """MobileNetV2's dw56 (C 144, wg_K 200704): 3 channel blocks. gfx1250's fill rule takes
    the fp16 packed atomic's rounding cap (97) as the degree; sm_90's waves rule the most
    that fit one round of 132 SMs x 2 resident CTAs (3 x 88 = 264), 4 with a code object
    that holds 4 (3 x 97 fits then, the cap again); the unsplit kernel runs one slice."""
    p = P("64,144,56,56,144,3,3,1,1,1,144")
    plan = plan_split_k(_spec("gfx1250", 3, 64, 4, 2, "atomic"), p)
    assert (plan.degree, plan.grid, plan.slice_k) == (97, (3, 1, 97), 2072)
    plan = plan_split_k(_spec("sm_90", 3, 64, 4, 2, "atomic"), p)
    assert (plan.degree, plan.grid, plan.slice_k) == (88, (3, 1, 88), 2284)
    plan = plan_split_k(_spec("sm_90", 3, 64, 4, 2, "atomic"), p, resident_ctas=4)
    assert (plan.degree, plan.grid) == (97, (3, 1, 97))
    one = plan_split_k(_spec("sm_90", 3, 64, 4, 2, "none"), p)
    assert (one.degree, one.grid, one.slice_k) == (1, (3, 1, 1), 200704)


def _run_spec(target: str, taps: int, tile_n: int, tile_k: int, vec: int, reduction: str,
              run: int, dtype: str = "fp16", dw: str | None = None) -> KernelSpec:
    spec = dataclasses.replace(_spec(target, taps, tile_n, tile_k, vec, reduction, dtype, dw),
                               wo_run=run)
    ok, why = validate(spec, limits=shipped_limits(target))
    assert ok, f"{spec.label()}: {why}"
    return spec


@pytest.mark.parametrize("case", [
    # runs of 4 over Wo 12 (3 a row), 36 positions a row of the image; k_step 256 over wg_K
    # 288: degree 2 ends mid-step, 7 leaves five slices empty
    ("sm_90", 3, 16, 64, 4, 4, "atomic", "fp16", None, "2,40,12,12,40,3,3,1,1,1,40", 2),
    ("sm_90", 3, 16, 64, 4, 4, "atomic", "fp16", None, "2,40,12,12,40,3,3,1,1,1,40", 7),
    ("gfx1250", 3, 32, 32, 4, 4, "none", "bf16", None, "1,36,9,8,36,3,3,1,1,1,36", None),
    # 8-channel vectors in runs of 2: a partial vector block (C 24 of 32), a 1x3 filter
    ("gfx1250", 3, 32, 32, 8, 2, "atomic", "fp16", None, "1,24,10,10,24,1,3,1,1,1,24", 3),
    ("sm_90", 3, 16, 64, 8, 2, "two_stage", "bf16", None, "2,24,9,10,24,3,3,1,1,1,24", 3),
    # 5x5 in runs of 2 (pad 2) and channel pairs in runs of 4 on a 3x3 problem (the taps
    # past it computed, never stored), the wave64 targets
    ("gfx950", 5, 32, 16, 4, 2, "atomic", "bf16", "fp32", "2,36,13,12,36,5,5,1,2,1,36", 3),
    ("gfx942", 5, 16, 32, 2, 4, "atomic", "fp16", None, "1,18,11,8,18,3,3,1,1,1,18", 2),
    ("gfx1201", 5, 16, 32, 2, 4, "none", "fp16", None, "1,18,9,12,18,5,5,1,2,1,18", None),
], ids=lambda c: f"{c[0]}-t{c[1]}-v{c[4]}-r{c[5]}-{c[6]}-{c[9]}@{c[10]}")
def test_runs_of_output_columns_on_their_edges(case):
    """A depthwise kernel with ``wo_run`` > 1 (each thread row a run of output columns,
    their pixels loaded once) against float64: runs that fill a row, slices that end mid
    step or are empty, partial channel blocks, padding, filters below the compiled taps."""
    *shape, run, reduction, dtype, dw, problem, degree = case
    spec = _run_spec(*shape, reduction, run, dtype, dw)
    r = run_emulated(spec, P(problem), split_k=degree, seed=3)
    check(r, dw or dtype)
    assert (r.plan.slice_k % spec.k_step, spec.k_step) == (0, spec.tile_k * run)
    if degree is not None:
        assert r.plan.degree == degree


def test_a_run_kernel_serves_stride_1_dilation_1_and_whole_runs_only():
    spec = _run_spec("sm_90", 3, 16, 64, 4, "atomic", 4)
    assert serves(spec, P("1,32,12,12,32,3,3,1,1,1,32")) == (True, "")
    for text, got in (("1,32,12,12,32,3,3,2,1,1,32", "stride 2, dilation 1, Wo 6"),
                      ("1,32,12,12,32,3,3,1,2,2,32", "stride 1, dilation 2, Wo 12"),
                      ("1,32,10,10,32,3,3,1,1,1,32", "stride 1, dilation 1, Wo 10")):
        assert serves(spec, P(text)) == (False, (
            "a run of 4 output columns shares its pixels at stride 1 and dilation 1 with Wo "
            f"a multiple of it (got {got})"))


def test_a_run_is_the_depthwise_kernels_own_and_its_label_says_it():
    spec = _run_spec("gfx942", 5, 16, 32, 2, "atomic", 4)
    assert spec.label() == "gfx942-fp16-t5x16x32-w4x1-v2x2-depthwise-default-atomic-r4"
    assert from_label(spec.label()) == spec and spec.k_step == 128
    assert "wo_run" in spec.canonical()
    assert "wo_run" not in dataclasses.replace(spec, wo_run=1).canonical()  # keys kept
    assert validate(dataclasses.replace(spec, wo_run=3), limits=None) == (
        False, "wo_run 3 not one of (1, 2, 4)")
    gemm = from_label("sm_90-fp16-t64x64x32-w2x2-v8x8-sync-default-none")
    assert validate(dataclasses.replace(gemm, wo_run=2), limits=None) == (
        False, "a run of output columns (wo_run 2) is the depthwise kernel's alone")
    with pytest.raises(ValueError, match="one column a step has no -r part"):
        from_label(spec.label().replace("-r4", "-r1"))


def test_a_planted_tap_offset_is_caught_in_a_run(monkeypatch):
    """Every pixel one column along: a run's shared pixels all move, and the comparison
    fails far outside its bound."""
    assert_planted_pixel_shift_caught(monkeypatch, _run_spec("sm_90", 3, 32, 32, 8, "none", 2),
                                      P("1,40,10,10,40,3,3,1,1,1,40"), 0, 1)
