"""ConvProblem parsing, the GEMM view, the float64 reference and the error model."""

from __future__ import annotations

import numpy as np
import pytest

from wgradcache.model.problem import (
    ConvProblem,
    _taps,
    error_bound,
    make_inputs,
    peak_normalised_error,
    reference_dw,
    round_to_dtype,
    slice_partials,
)


def test_parse_full_and_defaults():
    p = ConvProblem.parse("2, 8, 9, 7, 6, 3, 3, 2, 1, 1, 2")
    assert (p.N, p.C, p.H, p.W, p.K, p.Y, p.X) == (2, 8, 9, 7, 6, 3, 3)
    assert (p.stride, p.pad, p.dilation, p.groups) == (2, 1, 1, 2)
    assert (p.Ho, p.Wo) == (5, 4)
    assert (p.kpg, p.cpg) == (3, 4)
    assert (p.wg_M, p.wg_N, p.wg_K) == (3, 3 * 3 * 4, 2 * 5 * 4)
    assert ConvProblem.parse("1,3,8,8,4,1,1") == ConvProblem(1, 3, 8, 8, 4, 1, 1)
    assert ConvProblem.parse(p.short()) == p
    assert ConvProblem(1, 3, 8, 8, 4, 1, 1).short() == "1,3,8,8,4,1,1"


def test_dilation_extent():
    p = ConvProblem.parse("1,4,10,10,4,3,3,1,0,2")
    assert (p.Ho, p.Wo) == (6, 6)


@pytest.mark.parametrize("text, why", [
    ("1,2,3", "has 3 fields"),
    ("1,2,3,4,5,6,7,8,9,10,11,12", "has 12 fields"),
    ("1,2,3,4,5,6,x", "X 'x' is not an integer"),
    ("1,2,3,4,5,6,7.5", "is not an integer"),
    ("1,6,8,8,4,3,3,1,1,1,4", "C=6 is not divisible by groups=4"),
    ("1,8,8,8,6,3,3,1,1,1,4", "K=6 is not divisible by groups=4"),
    ("1,4,2,2,4,5,5", "empty output"),
    ("0,4,8,8,4,3,3", "N must be >= 1"),
    ("1,4,8,8,4,3,3,1,-1", "pad must be >= 0"),
    ("1,4,8,8,4,3,3,0", "stride must be >= 1"),
])
def test_parse_rejects_with_reason(text, why):
    with pytest.raises(ValueError, match=why.replace(".", r"\.")) as e:
        ConvProblem.parse(text)
    assert "\n" not in str(e.value)


def _brute_force(p: ConvProblem, x, dy):
    dw = np.zeros(p.dw_shape)
    for k in range(p.K):
        g = k // p.kpg
        for ty in range(p.Y):
            for tx in range(p.X):
                for c in range(p.cpg):
                    acc = 0.0
                    for n in range(p.N):
                        for ho in range(p.Ho):
                            for wo in range(p.Wo):
                                hi = ho * p.stride - p.pad + ty * p.dilation
                                wi = wo * p.stride - p.pad + tx * p.dilation
                                if 0 <= hi < p.H and 0 <= wi < p.W:
                                    acc += dy[n, ho, wo, k] * x[n, hi, wi, g * p.cpg + c]
                    dw[k, ty, tx, c] = acc
    return dw


@pytest.mark.parametrize("text", ["2,4,5,6,3,3,3,1,1", "1,6,7,7,4,3,3,2,1,1,2",
                                  "1,2,9,8,2,3,2,1,2,2", "2,3,4,4,5,1,1"])
def test_reference_matches_brute_force(text):
    p = ConvProblem.parse(text)
    x, dy = make_inputs(p, "fp16", seed=3)
    np.testing.assert_allclose(reference_dw(p, x, dy), _brute_force(p, x, dy), rtol=1e-12,
                               atol=1e-12)


def test_slices_sum_to_reference():
    p = ConvProblem.parse("2,4,6,6,8,3,3,1,1")
    x, dy = make_inputs(p, "bf16", seed=1)
    parts = slice_partials(p, x, dy, 16)
    assert parts.shape[0] == -(-p.wg_K // 16)
    np.testing.assert_allclose(parts.sum(axis=0), reference_dw(p, x, dy), atol=1e-12)


@pytest.mark.parametrize("dtype, ok_dtype", [("fp16", np.float16), ("bf16", None)])
def test_inputs_exactly_representable(dtype, ok_dtype):
    p = ConvProblem.parse("1,8,5,5,8,3,3,1,1")
    x, dy = make_inputs(p, dtype, seed=7)
    for a in (x, dy):
        assert np.array_equal(round_to_dtype(a, dtype), a)
        if ok_dtype is not None:
            assert np.array_equal(a.astype(ok_dtype).astype(np.float64), a)
        else:  # bf16: the low 16 bits of the fp32 pattern are zero
            assert not np.any(a.astype(np.float32).view(np.uint32) & 0xFFFF)
    assert len(np.unique(x)) > x.size // 4  # not a handful of repeated values


def test_bf16_rounding_ties_to_even():
    one = 1.0
    half_ulp = 2.0 ** -8
    assert round_to_dtype(np.array([one + half_ulp]), "bf16")[0] == one
    assert round_to_dtype(np.array([one + 3 * half_ulp]), "bf16")[0] == one + 4 * half_ulp
    assert round_to_dtype(np.array([one + 1.01 * half_ulp]), "bf16")[0] == one + 2 * half_ulp


def _simulate(p, x, dy, dw_dtype, degree, slice_k, reduction):
    """Sequential f32 accumulation per slice, then the model's reduction, in numpy."""
    wk = p.wg_K
    cols = []
    for _ty, _tx, win in _taps(p, x):
        cols.append(win.reshape(wk, p.C))
    xs = np.stack(cols, axis=1).astype(np.float32)  # [wk, taps, C]
    dys = dy.reshape(wk, p.K).astype(np.float32)
    out16 = np.float16 if dw_dtype == "fp16" else np.float32
    total = np.zeros((p.K, len(cols), p.cpg), dtype=np.float64)
    atom = np.zeros((p.K, len(cols), p.cpg), dtype=out16)
    for s in range(-(-wk // slice_k)):
        acc = np.zeros((p.K, len(cols), p.cpg), dtype=np.float32)
        for r in range(s * slice_k, min(wk, (s + 1) * slice_k)):
            for g in range(p.groups):
                ks = slice(g * p.kpg, (g + 1) * p.kpg)
                cs = slice(g * p.cpg, (g + 1) * p.cpg)
                acc[ks] += dys[r, ks][:, None, None] * xs[r, :, cs][None]
        if reduction == "atomic":
            atom = (atom + acc.astype(out16)).astype(out16)
        total += acc
    out = atom.astype(np.float64) if reduction == "atomic" else round_to_dtype(total, dw_dtype)
    return out.reshape(p.dw_shape)


@pytest.mark.parametrize("dw_dtype, reduction, degree", [
    ("fp16", "none", 1), ("fp32", "none", 1), ("fp16", "atomic", 5), ("fp32", "atomic", 4)])
def test_simulated_launch_within_bound(dw_dtype, reduction, degree):
    p = ConvProblem.parse("3,4,6,6,6,3,3,1,1,1,2")
    x, dy = make_inputs(p, "fp16", seed=11)
    slice_k = -(-p.wg_K // degree)
    out = _simulate(p, x, dy, dw_dtype, degree, slice_k, reduction)
    err = peak_normalised_error(out, reference_dw(p, x, dy))
    b = error_bound(p, x, dy, dw_dtype, split_k=degree, slice_k=slice_k, reduction=reduction)
    assert err <= b.bound
    assert b.bound <= (5e-3 if dw_dtype == "fp16" else 1e-4)
    if dw_dtype == "fp16":
        assert err > 0  # the data really rounds: the check is not vacuous


def test_bound_grows_with_atomic_degree_and_dtype():
    p = ConvProblem.parse("4,4,6,6,4,3,3,1,1")
    x, dy = make_inputs(p, "bf16", seed=2)
    b = [error_bound(p, x, dy, "bf16", split_k=d, slice_k=-(-p.wg_K // d),
                     reduction="atomic").bound for d in (1, 2, 4)]
    assert b[0] < b[1] < b[2]
    f16 = error_bound(p, x, dy, "fp16").bound
    f32 = error_bound(p, x, dy, "fp32").bound
    assert f32 < f16 < b[0]
    assert 2.0 ** -8 * 0.99 <= b[0]  # the store rounding of the peak element alone


def test_reference_layer_set_loads():
    from pathlib import Path

    from wgradcache.model.problem import load_layers

    layers = load_layers(Path(__file__).parent.parent / "layers" / "reference.yaml")
    assert len(layers) == len({la.name for la in layers}) >= 40
    by_name = {la.name: la for la in layers}
    stem = by_name["resnet50/conv1"].problem
    assert (stem.Ho, stem.Wo, stem.wg_N, stem.wg_K) == (112, 112, 7 * 7 * 3, 32 * 112 * 112)
    dw = by_name["mobilenetv2/dw56"].problem
    assert (dw.kpg, dw.cpg, dw.groups) == (1, 1, 144)
    assert by_name["deeplabv3/aspp.d24"].problem.Ho == 65
    assert {la.problem.groups > 1 for la in layers} == {True, False}
    assert all(la.count >= 1 for la in layers)


def test_load_layers_names_the_bad_entry(tmp_path):
    from wgradcache.model.problem import load_layers

    f = tmp_path / "l.yaml"
    f.write_text("schema: 1\nlayers:\n  - {name: a, problem: '1,3,8,8,4,3,3'}\n"
                 "  - {name: b, problem: '1,6,8,8,4,3,3,1,1,1,4'}\n")
    with pytest.raises(ValueError, match=r"layers\[1\] \(b\): .*C=6 is not divisible"):
        load_layers(f)
    f.write_text("schema: 1\nlayers:\n  - {name: a, problem: '1,3,8,8,4,3,3'}\n"
                 "  - {name: a, problem: '1,3,8,8,4,3,3'}\n")
    with pytest.raises(ValueError, match="repeated name 'a'"):
        load_layers(f)
