"""The fit's per-kernel factors (what the model's terms miss of one kernel's code) and the
code objects' residency in the fitted terms: recovered from synthetic timings, stored and
read back (bad values refused), and select ranking fitted kernels by them."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from wgradcache.cache.timings import (
    BadTimings,
    DeviceClass,
    Fit,
    TimingsFile,
    check_timings_doc,
    timings_bytes,
    timings_json,
)
from wgradcache.model.problem import ConvProblem
from wgradcache.pipeline.fit import FitSample, fit_samples, kernel_factors
from wgradcache.pipeline.select import (
    CostSources,
    Measurements,
    candidates_from_walk,
    cost_terms,
    fitted_ms,
    select,
)

T = "gfx1250"
TRUE = {"launch": 0.004, "issue": 2.5e-6, "lds": 1.2e-6, "epilogue": 4e-6, "l2": 1e-9}
PROBLEMS = ["2,32,8,8,32,3,3,1,1", "1,32,16,16,64,1,1", "4,64,8,8,32,3,3,1,1",
            "1,16,32,32,32,3,3,1,1", "8,32,8,8,64,1,1", "2,64,16,16,32,1,1,2"]
DEV = DeviceClass("AMD Fake GPU", 256, "6.4", "6.4")


def test_a_kernels_factor_is_the_geometric_mean_of_its_measured_over_fitted():
    s = [FitSample({}, 2.0, "a"), FitSample({}, 8.0, "a"), FitSample({}, 3.0, "b"),
         FitSample({}, 1.0, "c"), FitSample({}, 5.0, "")]
    got = kernel_factors(s, np.array([1.0, 1.0, 3.0, 0.0, 1.0]))
    # a: sqrt(2 * 8) = 4; b: 1; c: no fitted time > 0; the keyless sample: no kernel
    assert got == {"a": 4.0, "b": 1.0}
    assert kernel_factors([FitSample({}, 1e9, "d"), FitSample({}, 1e-9, "e")],
                          np.array([1.0, 1.0])) == {"d": 1000.0, "e": 0.001}  # FACTOR_RANGE


def test_the_fit_recovers_a_kernel_slower_than_its_terms():
    """Every kernel's times follow the constants except one, 1.5x slower on every problem
    (+-2 % noise): its factor comes back within 5 % of 1.5, the others' within 5 % of 1."""
    import random

    rng = random.Random(1)
    specs = candidates_from_walk(T, "fp16")
    samples, slow = [], None
    for text in PROBLEMS:
        p = ConvProblem.parse(text)
        for c in select(T, p, specs)[:30]:
            slow = slow or c.key
            terms = cost_terms(c.spec, p, c.slice_k, c.grid)
            ms = fitted_ms(TRUE, terms) * rng.uniform(0.98, 1.02)
            samples.append(FitSample(terms, ms * (1.5 if c.key == slow else 1.0), c.key))
    got = fit_samples(samples)
    assert not isinstance(got, str), got
    assert got.factors[slow] == pytest.approx(1.5, rel=0.05)
    others = [f for k, f in got.factors.items() if k != slow]
    assert len(others) >= 30 and all(abs(f - 1.0) <= 0.05 for f in others), others


def test_cost_terms_take_the_code_objects_residency():
    """sm_90, 264 CTAs on 132 SMs: at 2 a CU (the hand-set residency) one round, at 1 two;
    a 4-warp CTA alone issues at half the SM's rate, so its issue term doubles; 8 warps
    fill the rate either way."""
    p = ConvProblem.parse("32,256,14,14,256,3,3,1,1")
    specs = {(s.warp_m * s.warp_n): s for s in candidates_from_walk("sm_90", "fp16")
             if s.reduction == "none" and s.k_loop == "sync"}
    grid, slice_k = (12, 22, 1), 2304
    for warps, ratio in ((4, 2.0), (8, 1.0)):
        s = specs[warps]
        two, one = (cost_terms(s, p, slice_k, grid, None, r) for r in (2, 1))
        assert cost_terms(s, p, slice_k, grid) == two  # None: RESIDENT_CTAS
        assert one["issue"] / two["issue"] == pytest.approx(ratio)
        assert one["lds"] == pytest.approx(two["lds"]) and one["launch"] == 1.0


def test_select_ranks_fitted_kernels_by_their_factor():
    specs = candidates_from_walk(T, "fp16")
    p = ConvProblem.parse(PROBLEMS[0])
    plain = select(T, p, specs, costs=CostSources(measured=Measurements(constants=TRUE)))
    assert [c.cost_from for c in plain[:2]] == ["fitted", "fitted"]
    first, second = plain[0], plain[1]
    gap = second.expected_ms / first.expected_ms
    factors = {first.key: gap * 1.01}  # slower than the second by 1 %
    got = select(T, p, specs, costs=CostSources(measured=Measurements(
        constants=TRUE, factors=factors)))
    want = sorted(plain, key=lambda c: (c.expected_ms * factors.get(c.key, 1.0),
                                        c.spec.label()))
    assert [c.key for c in got] == [c.key for c in want] != [c.key for c in plain]
    assert got[0].key == second.key
    moved = next(c for c in got if c.key == first.key)
    assert moved.expected_ms == pytest.approx(first.expected_ms * gap * 1.01)


def _doc(factors) -> dict:
    fit = Fit(dict(TRUE), 0.1, 8, 2, 1, "0" * 64, 100.0, factors)
    return json.loads(timings_bytes(TimingsFile(DEV, (), (), fit)))


def test_a_fit_keeps_its_factors_and_an_older_fit_has_none():
    k = "ab" * 32
    assert check_timings_doc(_doc({k: 1.25})).fit.factors == {k: 1.25}
    old = _doc({})
    del old["fit"]["factors"]  # a file written before the factors
    assert check_timings_doc(old).fit.factors == {}
    assert timings_json(check_timings_doc(old))["fit"]["factors"] == {}


@pytest.mark.parametrize("factors, why", [
    ({"ab" * 32: -1.0}, "fit.factors.abababababab: -1.0 is not a number in [0.001, 1000]"),
    ({"ab" * 32: 0.0}, "fit.factors.abababababab: 0.0 is not a number in [0.001, 1000]"),
    ({"ab" * 32: 1e4}, "fit.factors.abababababab: 10000.0 is not a number in [0.001, 1000]"),
    ({"ab" * 32: math.inf}, "fit.factors.abababababab: inf is not a number in [0.001, 1000]"),
    ({"ab" * 32: math.nan}, "fit.factors.abababababab: nan is not a number in [0.001, 1000]"),
    ({"ab" * 32: "1.0"}, "fit.factors.abababababab: 1.0 is not a number in [0.001, 1000]"),
    ({"../x": 1.0}, "fit.factors: '../x' is not a key (64 hex digits)"),
    ([1.0], "fit.factors: not an object of at most 200000 kernels"),
    ({f"{i:064x}": 1.0 for i in range(200_001)},
     "fit.factors: not an object of at most 200000 kernels"),
])
def test_bad_factors_are_refused(factors, why):
    doc = _doc({})
    doc["fit"]["factors"] = factors
    with pytest.raises(BadTimings) as e:
        check_timings_doc(doc)
    assert str(e.value) == why


def test_a_rebuilt_kernels_factor_is_not_used(small_cache, tmp_path):
    """A factor comes from its kernel's rows: once the entry's blob is another (rebuilt),
    those rows are stale and the factor goes with them; a kernel with a current row keeps
    its factor."""
    import shutil

    from wgradcache.cache.store import TargetCache
    from wgradcache.cache.timings import TimingRow
    from wgradcache.pipeline.select import candidates_from_cache, measurements

    cache = tmp_path / "cache"
    shutil.copytree(small_cache["cache"], cache)
    got = candidates_from_cache(str(cache), T, "fp16")
    a, b = sorted(got.blobs)[:2]
    rows = (TimingRow(a, got.blobs[a], PROBLEMS[0], "fp16", 1, 0.5, 0.0, 10, 1.0),
            TimingRow(b, "ab" * 32, PROBLEMS[0], "fp16", 1, 0.5, 0.0, 10, 1.0))  # b rebuilt
    fit = Fit(dict(TRUE), 0.1, 8, 2, 1, "0" * 64, 100.0, {a: 1.5, b: 2.0})
    c = TargetCache(cache, T)
    with c.lock():
        c.write_timings(TimingsFile(DEV, rows, (), fit))
    m = measurements(str(cache), T, None, got.blobs)
    assert m.factors == {a: 1.5} and m.constants == TRUE
