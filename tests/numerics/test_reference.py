"""The float64 reference against a brute-force loop, slices, inputs and rounding."""

from __future__ import annotations

import numpy as np
import pytest

from wgradcache.model.problem import ConvProblem
from wgradcache.numerics.reference import (
    make_inputs,
    reference_dw,
    round_to_dtype,
    slice_partials,
)


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
