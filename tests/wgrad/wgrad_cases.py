"""Shared cases of the wgrad numerics tests: edge problems, a geometry spread, the checks."""

from __future__ import annotations

from wgradcache.jobs import default_jobdata
from wgradcache.model.problem import ConvProblem
from wgradcache.model.spec import KernelSpec, Limits, Tile, geometry_fits, validate
from wgradcache.model.targets import get_target
from wgradcache.numerics.run import EmulationReport
from wgradcache.wgrad.capability import serves

TARGETS = ("gfx1250", "gfx1201", "gfx1151")
AB_DTYPES = ("fp16", "bf16")

# each exercises an edge: partial last K tile (wg_K not a multiple of tile_k), partial M/N
# tiles, padding, stride and dilation holes, groups, an odd channel count
PROBLEMS = {
    "3x3s1p1": ConvProblem.parse("2,16,6,6,16,3,3,1,1"),  # wg_K 72, N 144
    "1x1": ConvProblem.parse("3,16,5,5,24,1,1"),  # wg_K 75 (odd), M 24
    "3x3s2": ConvProblem.parse("2,16,7,7,24,3,3,2,1"),  # downsample, Ho 4
    "dil2": ConvProblem.parse("1,8,9,9,8,3,3,1,2,2"),  # dilation 2, wg_K 81
    "groups2": ConvProblem.parse("2,16,6,6,16,3,3,1,1,1,2"),  # kpg 8, cpg 8
    "stem": ConvProblem.parse("2,3,9,9,16,3,3,2,1"),  # C=3: vec_b 1, wg_N 27 odd
    "oddK": ConvProblem.parse("1,8,5,7,8,3,3,1,1"),  # N*Ho*Wo = 35
    "partialMN": ConvProblem.parse("2,8,5,5,40,3,3,1,1"),  # M 40, N 72
}
# one problem with every edge at once, for sweeps over geometries
EDGE = ConvProblem.parse("1,8,7,7,40,3,3,1,1")  # wg_K 49, M 40, N 72, pad 1

# the carried B-gather coordinates (operand_b.XOperand.advance) at every wrap pattern of
# tile_k = q·HoWo + b·Wo + c: Wo > tile_k (c = tile_k, wo wraps over tiles), 1x1 outputs
# (Wo = Ho = 1: b = c = 0, img steps by tile_k), stride 2 + pad + dilation (q, b, c > 0),
# Ho wrapping into img at HoWo 15
WRAPS = {
    "wide": ConvProblem.parse("1,8,3,37,8,3,3,1,1"),  # Ho 3, Wo 37, wg_K 111
    "point": ConvProblem.parse("70,8,1,1,8,1,1"),  # Ho = Wo = 1, wg_K 70
    "s2d2": ConvProblem.parse("3,8,5,6,8,3,3,2,2,2"),  # Ho = Wo = 3, wg_K 27
    "ho_wrap": ConvProblem.parse("5,8,3,5,8,3,3,1,1"),  # HoWo 15, wg_K 75
}

# a spread of ladder geometries (tile_m, tile_n, tile_k, warp_m, warp_n)
GEOMETRIES = ((32, 32, 32, 1, 1), (64, 64, 32, 2, 2), (128, 64, 64, 4, 2), (32, 128, 64, 1, 2),
              (64, 32, 32, 2, 1), (128, 128, 32, 4, 2), (64, 128, 64, 2, 4), (32, 64, 32, 1, 2))

VEC_PAIRS = ((8, 8), (8, 4), (4, 8), (4, 4), (2, 2), (8, 1), (1, 1))
LIMIT = {"fp16": 5e-3, "bf16": 1e-2, "fp32": 1e-4}


def shipped_limits(target: str) -> Limits:
    """The shipped geometries file's budgets for ``target`` (what the walk keeps)."""
    return default_jobdata().limits_for(target)


def geometry_for(target: str, dtype: str, i: int) -> tuple[int, int, int, int, int]:
    """The i-th geometry of the spread (cyclic) that the target's ladder admits."""
    t = get_target(target)
    for j in range(len(GEOMETRIES)):
        g = GEOMETRIES[(i + j) % len(GEOMETRIES)]
        if geometry_fits(Tile(t, dtype, g), shipped_limits(target))[0]:
            return g
    raise AssertionError(f"no spread geometry fits {target} {dtype}")


def widest_vec(problem: ConvProblem, tile_m: int = 128, tile_n: int = 128) -> tuple[int, int]:
    for va, vb in VEC_PAIRS:
        if problem.kpg % va == 0 and problem.cpg % vb == 0 and tile_m % va == 0 \
                and tile_n % vb == 0:
            return va, vb
    return 1, 1


def make_spec(target: str, dtype: str, geometry, problem: ConvProblem | None = None, *,
              dw: str | None = None, vec: tuple[int, int] | None = None, **kw) -> KernelSpec:
    if kw.get("k_loop") != "async":
        va, vb = vec or widest_vec(problem, geometry[0], geometry[1])
        kw.update(vec_a=va, vec_b=vb)
    spec = KernelSpec(target, dtype, dw or dtype, *geometry, **kw)
    ok, why = validate(spec, limits=shipped_limits(target))
    assert ok, f"{spec.label()}: {why}"
    if problem is not None:
        ok, why = serves(spec, problem)
        assert ok, f"{spec.label()} on {problem.short()}: {why}"
    return spec


def check(r: EmulationReport, dw_dtype: str) -> None:
    """No hazard, error within the bound, the bound within the test limit."""
    assert not r.hazards, r.hazards
    assert r.error <= r.bound.bound, r.summary()
    assert r.bound.bound <= LIMIT[dw_dtype], f"bound too loose to test: {r.summary()}"
    assert r.out is not None and r.out.shape == r.ref.shape
    if dw_dtype != "fp32":
        assert r.error > 0  # 16-bit dW always rounds this data: the comparison is live


def assert_planted_pixel_shift_caught(monkeypatch, spec: KernelSpec, problem: ConvProblem,
                                      rows: int, cols: int) -> None:
    """A direct kernel passes ``problem``; with every pixel it reads moved ``rows`` down
    and ``cols`` along (``direct.pixel`` planted), its comparison fails far outside the
    bound, with no hazard to explain it."""
    import wgradcache.wgrad.direct as direct
    from wgradcache.pipeline.emulate import cached_kernel, run_emulated

    real = direct.pixel

    def shifted(kb, a, k, *rest):
        img, ho, wo, hi, wi = real(kb, a, k, *rest)
        return img, ho, wo, kb.add(hi, rows), kb.add(wi, cols)

    check(run_emulated(spec, problem), spec.dw_dtype)
    cached_kernel.cache_clear()
    monkeypatch.setattr(direct, "pixel", shifted)
    try:
        r = run_emulated(spec, problem)
        assert not r.hazards and r.error > 10 * r.bound.bound, r.summary()
    finally:
        cached_kernel.cache_clear()
