"""count == walk, zero rejects on the shipped file, per-target variant availability."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wgradcache.jobs import count, default_jobdata, walk
from wgradcache.jobs.geometries import CoverEntry
from wgradcache.model.spec import (
    DEPTHWISE_VARIANTS,
    DTYPE_KEYS,
    SMALL_C_VARIANTS,
    VARIANT_KEYS,
    Limits,
    direct_accumulators,
    dynamic_lds_bytes,
    from_label,
    is_direct,
    lds_bytes,
    validate,
)
from wgradcache.model.targets import TARGETS, kernel_target_names


def _gemm(specs):
    """The GEMM kernels of a walk (the direct ones, depthwise and small-C, have budgets of
    their own)."""
    return (s for s in specs if not is_direct(s))


def _walk_counts(target, dtypes, variants, data=None):
    out = {d: {} for d in dtypes}
    for s in walk(target, dtypes, variants, data):
        out[s.dtype_key][s.variant] = out[s.dtype_key].get(s.variant, 0) + 1
    return out


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("dtype", DTYPE_KEYS)
def test_count_equals_walk_per_variant(target, dtype):
    for variant in VARIANT_KEYS:
        n = count(target, [dtype], [variant])[dtype].get(variant, 0)
        assert n == len(list(walk(target, [dtype], [variant]))), (target, dtype, variant)


@pytest.mark.parametrize("target", kernel_target_names())
def test_shipped_walk_has_no_rejects_and_labels_round_trip(target):
    specs = list(walk(target, DTYPE_KEYS))
    assert specs
    assert len({s.identity_key() for s in specs}) == len(specs)  # no two jobs alike
    limits = default_jobdata().limits_for(target)
    for s in specs:
        ok, why = validate(s, limits=limits)
        assert ok, (s.label(), why)
        assert from_label(s.label()) == s


def test_async_and_two_stage_only_where_admitted():
    c = {t: count(t, ["fp16", "bf16"]) for t in kernel_target_names()}
    for d in ("fp16", "bf16"):
        assert c["gfx1250"][d]["async.cshuffle.atomic"] > 0
        assert c["gfx1250"][d]["sync.default.two_stage"] > 0
        for t in ("gfx1201", "gfx1151"):
            assert not any(v.startswith("async") or v.endswith("two_stage") for v in c[t][d])
    # gfx1151 lowers 16-bit packed atomics to a CAS loop: no 16-bit atomic split-K...
    assert not any(v.endswith(".atomic") for v in c["gfx1151"]["fp16"])
    # ...but its f32 atomic is native with the metadata: fp32 dW keeps atomic split-K.
    assert count("gfx1151", ["fp16_f32"])["fp16_f32"]["sync.default.atomic"] > 0


def test_mfma_variants_are_what_the_catalog_admits():
    """gfx942 / gfx950: sync loop only (no per-lane async copy), both epilogues, packed
    16-bit and f32 atomic split-K, two-stage (float atomics validated); wave64 geometries."""
    sync_variants = ({f"sync.{e}.{r}" for e in ("default", "cshuffle")
                      for r in ("none", "atomic", "two_stage")} - {"sync.cshuffle.two_stage"}
                     | set(DEPTHWISE_VARIANTS) | set(SMALL_C_VARIANTS))
    for t in ("gfx942", "gfx950"):
        for d in DTYPE_KEYS:
            # the depthwise two-stage kernel is for 16-bit dW only (f32 adds in place)
            want = sync_variants - ({"depthwise.default.two_stage"} if d.endswith("_f32")
                                    else set())
            assert set(count(t, [d])[d]) == want, (t, d)
        for s in walk(t, ["fp16", "bf16_f32"]):
            assert s.block_size == 64 * s.warp_m * s.warp_n <= 256
    # gfx942's 16x16x16 atom makes tile_k 64 four k-steps (over the budget); gfx950's
    # 16x16x32 keeps it
    assert {s.tile_k for s in _gemm(walk("gfx942", ["fp16"]))} == {32}
    assert {s.tile_k for s in _gemm(walk("gfx950", ["fp16"]))} == {32, 64}
    assert any(s.tile_m == 256 for s in walk("gfx942", ["bf16"]))


def test_mfma_counts_are_pinned():
    """The full builds' figures: gfx942 784 and gfx950 1172 jobs after the measured load
    bounds (filters.targets), none of which spilled; then the 64x64 warp tiles (128
    accumulators per lane) added 88 and 120 default-epilogue jobs, none spilled either."""
    c942, c950 = count("gfx942", ["fp16"])["fp16"], count("gfx950", ["fp16"])["fp16"]
    assert c942["sync.default.none"] == c942["sync.default.atomic"] == 151 + 22
    assert c942["sync.cshuffle.none"] == c942["sync.default.two_stage"] == 33
    assert c942["sync.cshuffle.atomic"] == 24
    assert c950["sync.default.none"] == c950["sync.default.atomic"] == 233 + 30
    assert c950["sync.default.two_stage"] == c950["sync.cshuffle.none"] == 42
    assert c950["sync.cshuffle.atomic"] == 36
    assert sum(sum(count(t)[d].values()) for t in ("gfx942", "gfx950") for d in ("fp16", "bf16")
               ) == 784 + 88 + 1172 + 120 + 2 * 132 + 2 * 28  # and 132 depthwise, 28 small-C


def test_mfma_load_bounds_are_the_measured_ones():
    from wgradcache.model.spec import loads_per_thread

    d = default_jobdata()
    assert d.limits_for("gfx942").max_loads_per_thread == 17
    assert d.limits_for("gfx950").max_loads_per_thread == 16
    for t, bound in (("gfx942", 17), ("gfx950", 16)):
        assert max(loads_per_thread(s.tile, s.load_widths)
                   for s in _gemm(walk(t, ["bf16"]))) <= bound


def test_sm90_measured_stack_frame_exclusions():
    """The (geometry, vec pair)s whose kernels keep a ptxas stack frame, measured on the
    current loop (2026-12-04, and 12-05's cshuffle 64x128x64 v4x4; the 12-03 list had four,
    three of which compile clean now): excluded for every variant and dtype (1608 -> 1596
    jobs: 1380 sync, 216 cp.async), their other vec pairs stay, and the validator refuses
    the excluded ones with the same reason."""
    import dataclasses

    d = default_jobdata()
    ex = {(32, 64, 64, 1, 1, 8, 8), (64, 128, 32, 2, 2, 8, 1), (64, 32, 64, 2, 1, 8, 1),
          (64, 64, 32, 4, 1, 8, 1), (64, 128, 64, 2, 4, 4, 4)}
    # 2026-12-06: the full build of sm_90's own ladder kept a frame in 82 sync kernels of 21
    # (geometry, vec pair)s
    new = {(32, 256, 32, 1, 2, 4, 4), (32, 256, 32, 1, 2, 8, 8), (32, 256, 32, 2, 1, 4, 4),
           (32, 256, 32, 2, 1, 8, 8), (64, 64, 64, 1, 1, 8, 8), (64, 128, 64, 1, 2, 8, 8),
           (64, 128, 64, 2, 1, 8, 8), (64, 256, 32, 2, 2, 4, 4), (64, 256, 64, 1, 4, 4, 4),
           (64, 256, 64, 1, 4, 8, 8), (64, 256, 64, 2, 2, 4, 4), (64, 256, 64, 2, 2, 8, 8),
           (64, 256, 64, 4, 1, 4, 4), (64, 256, 64, 4, 1, 8, 8), (128, 64, 64, 1, 2, 8, 8),
           (128, 64, 64, 2, 1, 8, 8), (128, 128, 64, 4, 1, 4, 4), (128, 256, 64, 4, 2, 4, 4),
           (256, 32, 32, 1, 2, 8, 1), (256, 32, 32, 2, 1, 8, 1), (256, 64, 32, 1, 4, 8, 8)}
    assert set(d.limits_for("sm_90").exclude) == ex | new
    ex |= new
    assert all(d.limits_for(t).exclude == () for t in ("gfx1250", "gfx942", "gfx950"))
    specs = list(_gemm(walk("sm_90")))
    # 2026-12-06: sm_90's own ladder (256-wide tiles, 128 accumulators, dynamic shared)
    # 2026-12-08: - 16 async kernels of the two exclude_async entries
    assert len(specs) + 132 + 28 == sum(sum(v.values()) for v in count("sm_90").values()) == 3210
    # + 360 grouped (cta_orders), + 320 deeper async rings (stages)
    row_major = [s for s in specs if s.cta_group == 1 and s.stages == 2]
    assert len(row_major) == 2370 and sum(s.k_loop == "sync" for s in row_major) == 2034
    got = {(*s.geometry, s.vec_a, s.vec_b) for s in specs}
    assert not got & ex
    # the neighbours that compile clean are walked, the three re-admitted ones among them
    assert {(32, 32, 64, 1, 1, 8, 8), (64, 64, 64, 1, 2, 4, 4), (64, 64, 64, 2, 1, 4, 4),
            (64, 128, 32, 2, 2, 8, 8), (64, 128, 32, 2, 2, 4, 4), (64, 32, 64, 2, 1, 8, 8),
            (128, 32, 64, 2, 1, 4, 4)} <= got
    s = next(s for s in specs if (*s.geometry, s.vec_a, s.vec_b) == (64, 128, 32, 2, 2, 8, 8)
             and s.dtype == "fp16" and s.epilogue == "default" and s.reduction == "atomic")
    bad = dataclasses.replace(s, vec_a=8, vec_b=1)
    assert validate(bad, limits=d.limits_for("sm_90")) == (
        False, "sm_90 keeps a stack frame for this geometry with vec pair (8, 1) (measured; "
               "geometries.yaml filters exclude it)")
    assert validate(bad, limits=None) == (True, "")  # a budget, not correctness
    assert validate(s, limits=d.limits_for("sm_90")) == (True, "")


def test_sm90_measured_async_stack_frame_exclusions():
    """The async (geometry, chunk pair)s whose kernels keep a stack frame (2026-12-08, A read
    in the MMA's register order): every variant and dtype of them left out (16 jobs), their
    other chunk pair and the sync kernels of the same geometries walked, an excluded spec
    refused by the validator with the reason, and no other target excludes any."""
    import dataclasses

    d = default_jobdata()
    ex = {(64, 32, 32, 2, 1, 4, 4), (32, 64, 64, 2, 2, 4, 4)}
    assert set(d.limits_for("sm_90").exclude_async) == ex
    assert all(d.limits_for(t).exclude_async == () for t in kernel_target_names()
               if t != "sm_90")
    specs = list(_gemm(walk("sm_90")))
    asyncs = {(*s.geometry, s.chunk_a, s.chunk_b) for s in specs if s.k_loop == "async"}
    assert not asyncs & ex
    geos = {g[:5] for g in ex}
    assert {(*g, 16, 16) for g in geos} <= asyncs
    assert geos <= {s.geometry for s in specs if s.k_loop == "sync"}
    s = next(s for s in specs if (*s.geometry, s.chunk_a, s.chunk_b) == (64, 32, 32, 2, 1, 16, 16)
             and s.dtype == "fp16" and s.variant == "async.default.none")
    bad = dataclasses.replace(s, chunk_a=4, chunk_b=4)
    assert validate(bad, limits=d.limits_for("sm_90")) == (
        False, "sm_90 keeps a stack frame for this geometry with async chunk pair (4, 4) "
               "(measured; geometries.yaml filters exclude_async it)")
    assert validate(bad, limits=None) == (True, "")
    assert validate(s, limits=d.limits_for("sm_90")) == (True, "")


def test_shipped_counts_are_pinned():
    # 109 ladder geometries (90 at 64 accumulators, 19 more at 128 since 2026-12-06) x 4 vec
    # pairs x {none, atomic} plus the cover's variants (19 shared + 128x128x32 w2x2); no
    # grouped CTA order on gfx1250 (cta_orders names sm_90 only); each async job of the 3
    # cover geometries of 128x128 tiles twice, with the 3-stage ring beside the ping-pong.
    c = count("gfx1250", ["fp16"])["fp16"]
    assert c["sync.default.none"] == c["sync.default.atomic"] == 109 * 4
    assert c["sync.cshuffle.none"] == c["sync.default.two_stage"] == 20 * 4
    assert c["sync.cshuffle.atomic"] == 20 * 2  # pairs with an even vec_b
    assert c["async.default.none"] == (20 + 3) * 2  # two chunk pairs
    # the twenty-two depthwise entries x {none, atomic, two-stage}, the seven small-C ones
    # x {none, atomic}
    assert c["depthwise.default.none"] == c["depthwise.default.atomic"] == 22
    assert c["depthwise.default.two_stage"] == 22
    assert c["small_c.default.none"] == c["small_c.default.atomic"] == 7
    assert sum(c.values()) == 109 * 8 + 20 * (4 + 2 + 4) + (20 + 3) * 4 * 2 + 66 + 14


def test_grouped_orders_are_the_wide_tiles_of_the_targets_named():
    """The grouped jobs are exactly the row-major jobs of tiles at least 128 on both sides,
    once more at G 8, on sm_90 only: the totals of cta_orders' comment."""
    totals = {}
    for t in kernel_target_names():
        specs = list(walk(t))
        grouped = {s for s in specs if s.cta_group != 1}
        wide = {dataclasses.replace(s, cta_group=8) for s in specs
                if s.cta_group == 1 and min(s.tile_m, s.tile_n) >= 128}
        assert grouped == (wide if t == "sm_90" else set()), t
        totals[t] = (len(specs), len(grouped))
    # 132 depthwise kernels on each target (60 on gfx1201: float atomics not validated for
    # two-stage, 64 accumulators; 14 on gfx1151: no 16-bit atomic, 32 accumulators, no
    # two-stage) and 28 small-C (16 on gfx1201: 64 accumulators; 4 on gfx1151)
    assert totals == {"gfx1250": (2672, 0), "gfx1201": (816, 0), "gfx1151": (282, 0),
                      "gfx950": (1452, 0), "gfx942": (1032, 0), "sm_90": (3210, 520)}


def test_deeper_rings_are_the_wide_async_jobs_of_the_targets_named():
    """The jobs past two stages are exactly the async jobs of tiles at least 128 on both
    sides, once more per count the stages section names (gfx1250: 3; sm_90: 3 and 4, its
    grouped orders included), nothing else changed: the totals of the section's comment."""
    named = {"gfx1250": (3,), "sm_90": (3, 4)}
    totals = {}
    for t in kernel_target_names():
        specs = list(walk(t))
        deep = {s for s in specs if s.stages != 2}
        want = {dataclasses.replace(s, stages=n) for s in specs for n in named.get(t, ())
                if s.stages == 2 and s.k_loop == "async" and min(s.tile_m, s.tile_n) >= 128}
        assert deep == want, t
        totals[t] = len(deep)
    assert totals == {"gfx1250": 48, "gfx1201": 0, "gfx1151": 0, "gfx950": 0, "gfx942": 0,
                      "sm_90": 320}
    # each fits: gfx1250's 5 stages (3 and 2 scratch) of 128x128x64 in its 320 KB LDS,
    # sm_90's 4 of 128x256x32 as dynamic shared memory
    assert {lds_bytes(s) for s in walk("gfx1250") if s.stages == 3
            and s.tile_k == 64 and s.epilogue == "default"} == {5 * 64 * 272 * 2}
    assert {dynamic_lds_bytes(s) for s in walk("sm_90", ["fp16"]) if s.stages == 4
            and s.geometry[:3] == (128, 256, 32) and s.epilogue == "default"} == {
                4 * 32 * 400 * 2}


def test_cshuffle_atomic_never_has_odd_store_vector():
    for s in walk("gfx1250", ["fp16"], ["sync.cshuffle.atomic", "async.cshuffle.atomic"]):
        assert s.store_vec % 2 == 0


def test_default_limits_match_the_shipped_filters():
    from wgradcache.model.spec import DEFAULT_LIMITS

    assert default_jobdata().limits == DEFAULT_LIMITS


axis = st.lists(st.sampled_from([16, 32, 48, 64, 96, 128, 256]), min_size=1, max_size=3,
                unique=True)
warps = st.lists(st.sampled_from([1, 2, 3, 4, 8]), min_size=1, max_size=3, unique=True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tm=axis, tn=axis, tk=st.lists(st.sampled_from([16, 32, 48, 64]), min_size=1,
                                     max_size=2, unique=True),
       wm=warps, wn=warps, acc=st.sampled_from([8, 32, 64, 128]),
       vec_pairs=st.lists(st.tuples(st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4, 8])),
                          min_size=1, max_size=4, unique=True),
       cover_pick=st.lists(st.integers(0, 10_000), max_size=5),
       groups=st.lists(st.sampled_from([2, 3, 4, 8]), max_size=2, unique=True),
       min_tile=st.sampled_from([16, 64, 128, 256]),
       rings=st.lists(st.sampled_from([3, 4]), max_size=2, unique=True),
       ring_tile=st.sampled_from([16, 64, 128]), data=st.data())
def test_count_equals_walk_on_random_ladders(tm, tn, tk, wm, wn, acc, vec_pairs, cover_pick,  # noqa: PLR0913 - hypothesis draws each axis
                                              groups, min_tile, rings, ring_tile, data):
    base = default_jobdata()
    ladder = {"tile_m": tuple(tm), "tile_n": tuple(tn), "tile_k": tuple(tk),
              "warp_m": tuple(wm), "warp_n": tuple(wn)}
    geoms = list(itertools.product(tm, tn, tk, wm, wn))
    # Random covers may name geometries some targets do not keep: the walk must skip them
    # on those targets exactly as count does.
    cover = tuple(CoverEntry(geoms[i % len(geoms)], "random", tuple(kernel_target_names()))
                  for i in sorted(set(cover_pick)))
    cover = tuple({c.geometry: c for c in cover}.values())
    # measured exclusions (geometry + vec pair) drop the same jobs from both
    exclude = tuple(dict.fromkeys((*geoms[i % len(geoms)], *vec_pairs[i % len(vec_pairs)])
                                  for i in cover_pick[:3]))
    # random grouped CTA orders on every target, its own budgets kept
    orders = dict(cta_groups=tuple(groups), cta_group_min_tile=min_tile,
                  stages=tuple(rings), stages_min_tile=ring_tile)
    # the random ladder is every wave size's (the wave64 targets walk it too)
    jd = dataclasses.replace(base, ladder=ladder, wave_ladders=(), cover=cover,
                             vec_pairs=tuple(vec_pairs),
                             limits=Limits(max_acc_per_lane=acc, max_block_size=256,
                                           min_block_size=32, exclude=exclude,
                                           cta_groups=orders["cta_groups"],
                                           cta_group_min_tile=min_tile, stages=tuple(rings),
                                           stages_min_tile=ring_tile),
                             target_limits=tuple((t, dataclasses.replace(lim, **orders))
                                                 for t, lim in base.target_limits))
    target = data.draw(st.sampled_from(kernel_target_names()))
    dtype = data.draw(st.sampled_from(DTYPE_KEYS))
    assert count(target, [dtype], None, jd) == {
        dtype: {v: n for v, n in _walk_counts(target, [dtype], None, jd)[dtype].items()}}


def test_per_target_budgets_apply_to_walk_and_validator():
    import dataclasses

    from wgradcache.model.spec import accumulators_per_lane, loads_per_thread

    d = default_jobdata()
    assert d.limits_for("gfx1151").max_acc_per_lane == 32
    assert d.limits_for("gfx1250").max_loads_per_thread == 192
    assert d.limits_for("gfx1201") == d.limits
    for s in _gemm(walk("gfx1151", ["fp16"])):
        assert accumulators_per_lane(s.tile_m, s.tile_n, s.warp_m, s.warp_n, 32) <= 32
    for s in walk("gfx1151", ["fp16"]):  # a direct kernel's: T·T·vec (x Cc for small-C)
        assert not is_direct(s) or direct_accumulators(s) <= 32
    for t in ("gfx1201", "gfx1151"):
        assert max(loads_per_thread(s.tile, s.load_widths)
                   for s in _gemm(walk(t, ["fp16"]))) <= 40
    # the validator reads the same budgets
    s = next(s for s in walk("gfx1201", ["fp16"]) if (s.tile_m, s.tile_n) == (128, 64))
    narrow = dataclasses.replace(s, vec_a=1, vec_b=1, warp_m=2, warp_n=2)
    assert validate(narrow, limits=d.limits_for("gfx1201")) == (
        False, "48 global loads per thread per K tile exceed the budget 40")
    assert validate(dataclasses.replace(narrow, target="gfx1250"),
                    limits=d.limits_for("gfx1250"))[0]
