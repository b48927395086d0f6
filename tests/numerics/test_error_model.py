"""The error model bounds a simulated launch, and grows where it must."""

from __future__ import annotations

import numpy as np
import pytest

from wgradcache.model.problem import ConvProblem
from wgradcache.numerics.error_model import SplitLayout, error_bound, peak_normalised_error
from wgradcache.numerics.reference import _taps, make_inputs, reference_dw, round_to_dtype


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
    b = error_bound(p, x, dy, dw_dtype, SplitLayout(degree, slice_k, reduction))
    assert err <= b.bound
    assert b.bound <= (5e-3 if dw_dtype == "fp16" else 1e-4)
    if dw_dtype == "fp16":
        assert err > 0  # the data really rounds: the check is not vacuous


def test_bound_grows_with_atomic_degree_and_dtype():
    p = ConvProblem.parse("4,4,6,6,4,3,3,1,1")
    x, dy = make_inputs(p, "bf16", seed=2)
    b = [error_bound(p, x, dy, "bf16", SplitLayout(d, -(-p.wg_K // d), "atomic")).bound
         for d in (1, 2, 4)]
    assert b[0] < b[1] < b[2]
    f16 = error_bound(p, x, dy, "fp16").bound
    f32 = error_bound(p, x, dy, "fp32").bound
    assert f32 < f16 < b[0]
    assert 2.0 ** -8 * 0.99 <= b[0]  # the store rounding of the peak element alone
