"""KernelSpec identity, labels and the validator's reasons."""

from __future__ import annotations

import dataclasses

import pytest

from wgradcache.model.spec import (
    DEFAULT_LIMITS,
    KernelSpec,
    Limits,
    LoadWidths,
    dynamic_lds_bytes,
    from_label,
    geometry_fits,
    lds_bytes,
    sync_k_outer,
    sync_row_pad,
    validate,
)
from wgradcache.model.targets import get_target

BASE = KernelSpec(target="gfx1250", dtype="fp16", dw_dtype="fp16", tile_m=64, tile_n=64,
                  tile_k=32, warp_m=2, warp_n=2, vec_a=8, vec_b=8)


def test_identity_key_is_pinned():
    # Golden: changing the canonical form changes every cache entry's identity.
    assert BASE.canonical_json() == (
        '{"chunk_a":0,"chunk_b":0,"dtype":"fp16","dw_dtype":"fp16","epilogue":"default",'
        '"k_loop":"sync","reduction":"none","schema":1,"target":"gfx1250","tile_k":32,'
        '"tile_m":64,"tile_n":64,"vec_a":8,"vec_b":8,"warp_m":2,"warp_n":2,"ws_replicas":0}')
    assert BASE.identity_key() == (
        "0df76eae2ee2e560841d00fb3c05f0b057a277c8a8a7882e9a55480326ca1f9d")


def test_label_round_trip_of_every_kind():
    specs = [BASE,
             dataclasses.replace(BASE, dw_dtype="fp32", reduction="atomic"),
             dataclasses.replace(BASE, vec_a=0, vec_b=0, chunk_a=16, chunk_b=4, k_loop="async",
                                 epilogue="cshuffle", reduction="atomic"),
             dataclasses.replace(BASE, dtype="bf16", dw_dtype="bf16", reduction="two_stage",
                                 ws_replicas=8)]
    for s in specs:
        assert from_label(s.label()) == s
    assert specs[1].label() == "gfx1250-fp16-dwfp32-t64x64x32-w2x2-v8x8-sync-default-atomic"


def test_bad_label_is_a_clear_error():
    with pytest.raises(ValueError, match="not a kernel label"):
        from_label("gfx1250-fp16-nonsense")


def test_grouped_cta_order_round_trips_and_the_default_keeps_its_identity():
    """The order is a label part and an identity field only where it is not row-major:
    BASE's label and key are the pinned ones, a grouped twin differs in both."""
    g8 = dataclasses.replace(BASE, reduction="two_stage", ws_replicas=8, cta_group=8)
    assert g8.label() == "gfx1250-fp16-t64x64x32-w2x2-v8x8-sync-default-two_stage-wsr8-g8"
    assert from_label(g8.label()) == g8
    assert from_label(BASE.label()).cta_group == 1
    assert "cta_group" not in BASE.canonical() and g8.canonical()["cta_group"] == 8
    assert BASE.identity_key() == (
        "0df76eae2ee2e560841d00fb3c05f0b057a277c8a8a7882e9a55480326ca1f9d")
    g4 = dataclasses.replace(BASE, cta_group=4)
    assert g4.identity_key() != BASE.identity_key() and g4.label() == BASE.label() + "-g4"


@pytest.mark.parametrize("tail", ["-g1", "-g0", "-g08", "-g"])
def test_a_row_major_or_padded_group_in_a_label_is_refused(tail):
    """-g1 would name BASE a second way (the label is the cache's dedup key)."""
    with pytest.raises(ValueError, match="not a kernel label"):
        from_label(BASE.label() + tail)


def test_cta_order_rule_the_generator_and_the_job_data():
    """Any group in range is a correct kernel (limits None); the job data admits only the
    groups it names, on tiles at least its min tile on both sides."""
    wide = dataclasses.replace(BASE, tile_m=128, tile_n=128, warp_m=2, warp_n=4, cta_group=8)
    data = Limits(cta_groups=(8,), cta_group_min_tile=128)
    assert validate(wide, limits=data) == (True, "")
    assert validate(dataclasses.replace(BASE, cta_group=3), limits=None) == (True, "")
    assert validate(dataclasses.replace(BASE, cta_group=8), limits=data) == (
        False, "grouped CTA order on a 64x64 tile: the job data groups tiles of at least 128 "
               "on both sides")
    assert validate(dataclasses.replace(wide, cta_group=4), limits=data) == (
        False, "grouped CTA order 4 is not one the job data gives this target "
               "(cta_orders: 8)")
    assert validate(wide, limits=DEFAULT_LIMITS)[1].endswith("(cta_orders: none)")
    for bad in (0, 65):
        assert validate(dataclasses.replace(BASE, cta_group=bad), limits=None) == (
            False, f"cta_group {bad} outside [1, 64]")


@pytest.mark.parametrize("change, reason", [
    (dict(target="gfx1151", reduction="atomic"), "compare-and-swap loop"),
    (dict(target="gfx1201", k_loop="async", vec_a=0, vec_b=0, chunk_a=16, chunk_b=16),
     "no async global->LDS copy"),
    (dict(k_loop="async", chunk_a=16, chunk_b=16), "vec_a/vec_b must be left unset"),
    (dict(k_loop="async", vec_a=0, vec_b=0, chunk_a=2, chunk_b=16), "not an async copy width"),
    (dict(epilogue="cshuffle", reduction="atomic", vec_b=1), "store vector 1 is odd"),
    (dict(target="gfx1201", reduction="two_stage", ws_replicas=8), "not validated"),
    (dict(reduction="two_stage", ws_replicas=0), "ws_replicas 0 must be >= 1"),
    (dict(reduction="two_stage", ws_replicas=8, epilogue="cshuffle"), "default epilogue"),
    (dict(ws_replicas=8), "belongs to two-stage"),
    (dict(tile_m=48), "not a multiple of the atom's m"),
    (dict(tile_k=16), "not a multiple of the atom's k 32"),
    (dict(tile_m=128, tile_n=128, warp_m=2, warp_n=2), "128 accumulator registers"),
    (dict(warp_m=4, warp_n=4, tile_m=128, tile_n=128), "block size 512"),
    (dict(vec_a=3), "vec_a 3 not one of"),
    (dict(dw_dtype="bf16"), "dW dtype 'bf16' must be fp16 or fp32"),
    (dict(target="gfx950", k_loop="async", vec_a=0, vec_b=0, chunk_a=16, chunk_b=16),
     "gfx950 has no async global->LDS copy"),
    (dict(target="gfx942", tile_k=64), "4 k-steps of the 16x16x16 atom"),
    (dict(target="gfx1300"), "unknown target 'gfx1300'"),
])
def test_rejects_come_with_their_reason(change, reason):
    ok, why = validate(dataclasses.replace(BASE, **change), limits=DEFAULT_LIMITS)
    assert not ok
    assert reason in why


def test_lds_budget_is_the_targets():
    big = dataclasses.replace(BASE, target="gfx1201", tile_m=128, tile_n=128, tile_k=32,
                              warp_m=2, warp_n=4, epilogue="cshuffle")
    assert lds_bytes(big) == 65536 and validate(big, limits=DEFAULT_LIMITS) == (True, "")
    # gfx1250's 320 KiB take an async double buffer of 128x128x64 with room to spare
    a = dataclasses.replace(BASE, tile_m=128, tile_n=128, tile_k=64, warp_m=2, warp_n=4,
                            vec_a=0, vec_b=0, chunk_a=16, chunk_b=16, k_loop="async")
    # two K-outer stages and the scratch stage of out-of-range copies
    assert lds_bytes(a) == 3 * 64 * 272 * 2
    assert validate(a, limits=DEFAULT_LIMITS) == (True, "")
    huge = dataclasses.replace(big, tile_k=128, epilogue="default")
    assert validate(huge, limits=Limits(max_k_steps=8)) == (
        False, "LDS 69632 B (sync loop, default epilogue) exceeds gfx1201's 65536 B")
    assert validate(huge, limits=DEFAULT_LIMITS)[1] == (
        "tile_k 128 is 8 k-steps of the 16x16x16 atom, over the budget 2")


@pytest.mark.parametrize("target, tile_k, pad", [
    ("gfx1250", 32, 8), ("gfx1250", 64, 8), ("gfx1201", 32, 8), ("gfx942", 32, 8),
    ("sm_90", 32, 16), ("sm_90", 64, 16), ("sm_90", 16, 0)])
def test_sync_row_pad_makes_the_pitch_an_odd_multiple_of_the_span(target, tile_k, pad):
    t = get_target(target)
    assert sync_row_pad(t, "fp16", tile_k) == pad == sync_row_pad(t, "bf16", tile_k)
    pitch = (tile_k + pad) * 2
    # the rows of one 128-byte phase start on distinct bank groups
    starts = {(r * pitch) % 128 // t.lds_row_span for r in range(128 // t.lds_row_span)}
    assert len(starts) == 128 // t.lds_row_span


def test_sm90_sync_lds_is_k_outer():
    """sm_90's sync loop keeps K-outer tiles (read with ldmatrix .trans): tile_k rows of
    tile_mn + 8 elements per operand, as the async loop's, two stages where they fit."""
    s = dataclasses.replace(BASE, target="sm_90", tile_k=64)
    sm90, g1250 = get_target("sm_90"), get_target("gfx1250")
    assert sync_k_outer(sm90, "fp16", 8, 8) and sync_k_outer(sm90, "bf16", 1, 1)
    assert not sync_k_outer(get_target("gfx1201"), "fp16", 8, 8)
    # gfx1250: only where both vectors are 8 elements (a narrow K-outer store is narrow)
    assert sync_k_outer(g1250, "fp16", 8, 8) and not sync_k_outer(g1250, "fp16", 8, 1)
    k_outer = dataclasses.replace(BASE, target="gfx1250", tile_m=128, tile_n=128,
                                  warp_m=2, warp_n=4)
    assert lds_bytes(k_outer) == 2 * 32 * (128 + 8 + 128 + 8) * 2
    assert lds_bytes(dataclasses.replace(k_outer, vec_b=1)) == 2 * 256 * (32 + 8) * 2
    assert lds_bytes(s) == 2 * 64 * (64 + 8 + 64 + 8) * 2  # two stages
    assert validate(s, limits=Limits(max_k_steps=4)) == (True, "")
    # two 128x64x64 stages are 53248 B, over the 48 KB of static shared memory: two stages
    # all the same, as dynamic shared memory (227 KB; one stage and two barriers before)
    two = dataclasses.replace(s, tile_m=128, warp_m=2, warp_n=2)
    assert lds_bytes(two) == dynamic_lds_bytes(two) == 2 * 64 * (128 + 8 + 64 + 8) * 2
    assert dynamic_lds_bytes(s) == 0
    # 128x128x32: two stages fit now (34816 B; 2 x 24576 K-contiguous did not)
    wide = dataclasses.replace(s, tile_m=128, tile_n=128, tile_k=32, warp_m=2, warp_n=4)
    assert lds_bytes(wide) == 2 * 32 * (128 + 8 + 128 + 8) * 2


def test_limits_are_required_and_none_checks_the_rules_alone():
    with pytest.raises(TypeError, match="limits"):
        validate(BASE)  # no default budgets read from a file
    fat = dataclasses.replace(BASE, tile_m=128, tile_n=128)  # 128 accumulators per lane
    assert validate(fat, limits=DEFAULT_LIMITS) == (
        False, "128 accumulator registers per lane exceed the budget 64")
    assert validate(fat, limits=Limits(max_acc_per_lane=128)) == (True, "")
    assert validate(fat, limits=None) == (True, "")  # over a budget, still a correct kernel
    # the target's own limits hold without budgets
    wide = dataclasses.replace(BASE, tile_m=256, tile_n=256, warp_m=8, warp_n=8)
    assert validate(wide, limits=None) == (False, "block size 2048 outside [32, 1024]")
    lds = dataclasses.replace(BASE, target="gfx1201", tile_m=128, tile_n=128, tile_k=128,
                              warp_m=2, warp_n=4)
    assert validate(lds, limits=None) == (
        False, "LDS 69632 B (sync loop, default epilogue) exceeds gfx1201's 65536 B")
    assert geometry_fits(lds.tile, None) == (
        False, "LDS 69632 B (sync loop, default epilogue) exceeds gfx1201's 65536 B")


@pytest.mark.parametrize("label, widths, fields, elements", [
    ("gfx1250-fp16-t64x64x32-w2x2-v8x4-sync-default-none", LoadWidths("sync", 8, 4),
     {"vec_a": 8, "vec_b": 4}, (8, 4)),
    ("gfx1250-bf16-t64x64x32-w2x2-c16x4-async-default-none", LoadWidths("async", 16, 4),
     {"chunk_a": 16, "chunk_b": 4}, (8, 2)),
])
def test_load_widths_are_the_loops_fields(label, widths, fields, elements):
    """A spec's widths are its loop's pair (elements sync, bytes async); the walk builds a
    spec's fields from them, and their elements are the spec's per-load vectors."""
    s = from_label(label)
    assert s.load_widths == widths and widths.spec_fields() == fields
    assert widths.elements(s.dtype) == (s.load_vec_a, s.load_vec_b) == elements
    assert s.tile.geometry == (64, 64, 32, 2, 2) and s.tile.target == get_target("gfx1250")


def test_model_imports_no_job_data():
    """The rules take their budgets from the caller: model/ never reaches for jobs/."""
    import subprocess
    import sys

    code = ("import sys, wgradcache.model.spec, wgradcache.model.problem, "
            "wgradcache.model.targets, wgradcache.model.devices\n"
            "print(' '.join(m for m in sys.modules if m.startswith(('wgradcache.', 'numpy'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert "wgradcache.model.spec" in out
    # no job data, no numerics (numpy would also cost count its 0.5 s budget)
    assert not [m for m in out if m.startswith(("wgradcache.jobs", "wgradcache.numerics",
                                                "numpy"))]


# ---- the async loop's LDS ring (stages) ------------------------------------------------

ASYNC = dataclasses.replace(BASE, target="sm_90", tile_m=128, tile_n=128, warp_m=2, warp_n=4,
                            vec_a=0, vec_b=0, chunk_a=16, chunk_b=16, k_loop="async")


def test_a_deeper_ring_round_trips_and_two_stages_keep_their_label_and_identity():
    """The ring is a label part and an identity field only past the ping-pong: an async
    kernel of two stages keeps its pinned label and key, a deeper twin differs in both, and
    both suffixes compose (grouped order first)."""
    assert "stages" not in ASYNC.canonical()
    assert ASYNC.label() == "sm_90-fp16-t128x128x32-w2x4-c16x16-async-default-none"
    assert ASYNC.identity_key() == (
        "783e3cb8c16b13e6bd3e7b12b078cd5f0da491768d760563d60a6b008658359a")  # before stages
    s3 = dataclasses.replace(ASYNC, stages=3, cta_group=8)
    assert s3.label() == ASYNC.label() + "-g8-s3"
    assert from_label(s3.label()) == s3 and from_label(ASYNC.label()).stages == 2
    assert s3.canonical()["stages"] == 3
    assert dataclasses.replace(ASYNC, stages=3).identity_key() != ASYNC.identity_key()


@pytest.mark.parametrize("tail", ["-s2", "-s1", "-s03", "-s", "-s3-g8"])
def test_two_stages_padded_or_reordered_ring_in_a_label_is_refused(tail):
    """-s2 would name a kernel a second way (the label is the cache's dedup key)."""
    with pytest.raises(ValueError, match="not a kernel label"):
        from_label(ASYNC.label() + tail)


def test_ring_rule_the_generator_and_the_job_data():
    """Any count in [2, 4] whose stages fit is a correct async kernel (limits None); the
    sync loop has only 2; the job data admits the counts it names on its wide tiles."""
    data = Limits(stages=(3,), stages_min_tile=128)
    s3 = dataclasses.replace(ASYNC, stages=3)
    assert validate(s3, limits=None) == validate(s3, limits=data) == (True, "")
    assert validate(dataclasses.replace(s3, stages=4), limits=data) == (
        False, "4 async stages is not a count the job data gives this target (stages: 3)")
    assert validate(s3, limits=DEFAULT_LIMITS)[1].endswith("(stages: none)")
    narrow = dataclasses.replace(s3, tile_n=64, warp_n=2)
    assert validate(narrow, limits=None) == (True, "")
    assert validate(narrow, limits=data) == (
        False, "3 async stages on a 128x64 tile: the job data deepens tiles of at least 128 "
               "on both sides")
    assert validate(dataclasses.replace(BASE, stages=3), limits=None) == (
        False, "a ring of 3 LDS stages belongs to the async loop")
    for bad in (1, 5):
        assert validate(dataclasses.replace(ASYNC, stages=bad), limits=None) == (
            False, f"stages {bad} outside [2, 4]")


def test_ring_lds_scratch_stages_and_dynamic_shared_memory():
    """gfx1250 allocates one scratch stage per tile in flight beside the ring (2S - 1
    stages), sm_90 the ring alone, past 48 KB as dynamic shared memory; a ring whose
    stages do not fit is refused by the LDS rule."""
    stage = 32 * (128 + 128 + 16) * 2  # tile_k rows of tile_mn + 8, both operands, fp16
    g = dataclasses.replace(ASYNC, target="gfx1250", warp_m=2, warp_n=2)
    assert [lds_bytes(dataclasses.replace(g, stages=s)) for s in (2, 3, 4)] == [
        3 * stage, 5 * stage, 7 * stage]
    assert [lds_bytes(dataclasses.replace(ASYNC, stages=s)) for s in (2, 3, 4)] == [
        2 * stage, 3 * stage, 4 * stage]
    assert dynamic_lds_bytes(dataclasses.replace(ASYNC, stages=3)) == 3 * stage
    big = dataclasses.replace(ASYNC, tile_m=256, tile_n=256, tile_k=64, stages=4)
    assert validate(big, limits=None) == (
        False, "LDS 270336 B (async loop, 4 stages, default epilogue) exceeds sm_90's "
               "232448 B")
