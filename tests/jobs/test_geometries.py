"""A bad geometries file is one error naming the file, the line and the field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from wgradcache.cli import main
from wgradcache.jobs import GeometryFileError, load
from wgradcache.jobs.geometries import default_path

SHIPPED = default_path().read_text()


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "g.yaml"
    p.write_text(text)
    return p


def test_shipped_file_loads_with_19_shared_4_wave64_and_4_sm90_cover_entries():
    d = load()
    assert len(d.cover) == 27
    assert all(c.reason for c in d.cover)
    wave64 = [c for c in d.cover if set(c.targets) <= {"gfx942", "gfx950"}]
    assert len(wave64) == 3
    assert len([c for c in d.cover if c.targets == ("sm_90",)]) == 4
    assert len(d.cover_for("gfx1250")) == 19 + 1  # and 128x128x32 w2x2 (64x64 warps)
    assert len(d.cover_for("gfx1201")) == 10  # its filters keep ten (unchanged)
    assert len(d.cover_for("sm_90")) == 19 + 1 + 4  # and 128x128x32 w2x2 beside gfx9xx


def test_wave64_targets_walk_their_own_ladder():
    d = load()
    assert d.ladder_for("gfx942") == d.ladder_for("gfx950") == dict(d.wave_ladders)[64]
    assert d.ladder_for("gfx1250") == d.ladder_for("gfx1151") == d.ladder
    assert 256 in d.ladder_for("gfx942")["tile_m"] and 256 not in d.ladder["tile_m"]
    assert len(d.ladder_geometries("gfx950")) == 4 * 4 * 2 * 3 * 3
    assert len(d.ladder_geometries()) == len(d.ladder_geometries("gfx1201")) == 3 * 3 * 2 * 3 * 3


def test_a_target_may_walk_a_ladder_of_its_own(tmp_path):
    """sm_90's (``ladder_targets``) comes before its wave size's and the shared one; a
    target's ladder names a target of the catalog and is checked as a ladder is."""
    d = load()
    assert dict(d.target_ladders)["sm_90"] == d.ladder_for("sm_90")
    assert d.ladder_for("sm_90")["tile_m"] == (32, 64, 128, 256)
    assert d.ladder_for("gfx1250") == d.ladder and 256 not in d.ladder["tile_m"]
    assert len(d.ladder_geometries("sm_90")) == 4 * 4 * 2 * 3 * 3
    head = "ladder_targets:\n  sm_90:\n"
    assert head in SHIPPED
    with pytest.raises(GeometryFileError, match=r":\d+: ladder_targets.sm_91: unknown target"):
        load(_write(tmp_path, SHIPPED.replace(head, "ladder_targets:\n  sm_91:\n")))
    bad = SHIPPED.replace(head + "    tile_m: [32, 64, 128, 256]",
                          head + "    tile_m: [32, 64, 128, -256]")
    assert bad != SHIPPED
    with pytest.raises(GeometryFileError, match=r": ladder_targets.sm_90.tile_m\[3\]: "):
        load(_write(tmp_path, bad))
    listed = re.sub(r"ladder_targets:\n(?: .*\n)+", "ladder_targets: [sm_90]\n", SHIPPED)
    assert listed != SHIPPED
    with pytest.raises(GeometryFileError, match=r"ladder_targets: expected a mapping"):
        load(_write(tmp_path, listed))


def test_cover_entry_on_the_wave64_ladder_only_serves_wave64_targets(tmp_path):
    entry = ("[256, 64, 32, 2, 2]\n    reason: wide kpg (256+, bottleneck reductions) on four "
             "64-lane waves\n")
    text = SHIPPED.replace(entry + "    targets: [gfx942, gfx950]\n", entry)
    assert text != SHIPPED
    d = load(_write(tmp_path, text))
    c = next(c for c in d.cover if c.geometry == (256, 64, 32, 2, 2))
    assert set(c.targets) == {"gfx950", "gfx942", "sm_90"}  # the ladders that have 256
    bad = SHIPPED.replace(entry + "    targets: [gfx942, gfx950]\n",
                          entry + "    targets: [gfx1250]\n")
    assert bad != SHIPPED
    with pytest.raises(GeometryFileError, match=r"not on gfx1250's ladder \(tile_m 256 is not "
                                                r"on the ladder\)"):
        load(_write(tmp_path, bad))


def test_wave64_ladder_errors_name_their_section(tmp_path):
    bad = SHIPPED.replace("ladder_wave64:\n  tile_m: [32, 64, 128, 256]",
                          "ladder_wave64:\n  tile_m: [32, 64, 128, 2048]")
    assert bad != SHIPPED
    with pytest.raises(GeometryFileError, match=r": ladder_wave64.tile_m\[3\]: "):
        load(_write(tmp_path, bad))


@pytest.mark.parametrize(
    "old, new, at, field, problem",
    [
        (
            "  tile_k: [32, 64]",
            "  tile_k: [32, sixty]",
            "tile_k: [32, sixty]",
            "ladder.tile_k[1]",
            "expected an integer",
        ),
        (
            "  max_acc_per_lane: 64",
            "  max_acc_per_lane: 0",
            "max_acc_per_lane: 0",
            "filters.max_acc_per_lane",
            "must be in [1, 1024], got 0",
        ),
        ("  - [8, 1]", "  - [8, 3]", "- [8, 3]", "vec_pairs[2]", "vec_b 3 not one of"),
        (
            "  - [4, 4]\n\n# f32 workspace",
            "  - [4, 2]\n\n# f32 workspace",
            "- [4, 2]",
            "async_chunk_pairs[1]",
            "not an async copy width",
        ),
        (
            "  default: [fp16, bf16]",
            "  default: [fp16, fp8]",
            "default: [fp16, fp8]",
            "dtypes.default[1]",
            "unknown 'fp8'",
        ),
        (
            "  - geometry: [32, 32, 32, 1, 1]",
            "  - geometry: [32, 32, 16, 1, 1]",
            "geometry: [32, 32, 16, 1, 1]",
            "cover[0].geometry",
            "tile_k 16 is not on the ladder",
        ),
        (
            "  - geometry: [32, 32, 32, 1, 1]",
            "  - geometry: [128, 128, 32, 1, 1]",
            "geometry: [128, 128, 32, 1, 1]",
            "cover[0].geometry",
            "accumulator registers per lane exceed",
        ),
        (
            "    reason: depthwise and small grouped layers (kpg, cpg <= 32), one wave\n",
            "",
            "geometry: [32, 32, 32, 1, 1]",
            "cover[0]",
            "missing key 'reason'",
        ),
        ("ws_replicas: 8", "ws_replicas: 8\nextra: 1", "extra: 1", "extra", "unknown key"),
    ],
)
def test_schema_errors_name_file_line_and_field(tmp_path, old, new, at, field, problem):
    assert old in SHIPPED
    text = SHIPPED.replace(old, new, 1)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if at in ln)
    p = _write(tmp_path, text)
    with pytest.raises(GeometryFileError) as e:
        load(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}:{line}: {field}: "), msg
    assert problem in msg
    assert "\n" not in msg


@pytest.mark.parametrize("old, new, field, problem", [
    ("    gfx1151:  #", "    gfx9000:  #", "filters.targets.gfx9000", "unknown target"),
    ("      max_acc_per_lane: 32", "      max_acc: 32", "filters.targets.gfx1151.max_acc",
     "unknown filter"),
])
def test_per_target_filter_errors(tmp_path, old, new, field, problem):
    assert old in SHIPPED
    p = _write(tmp_path, SHIPPED.replace(old, new, 1))
    with pytest.raises(GeometryFileError, match=rf": {field}: {problem}"):
        load(p)


@pytest.mark.parametrize("new, field, problem", [
    ("  sm_90: {groups: [1], min_tile: 128}", "cta_orders.sm_90.groups[0]",
     "must be in [2, 64], got 1"),
    ("  sm_90: {groups: [8, 8], min_tile: 128}", "cta_orders.sm_90.groups", "repeated value"),
    ("  sm_90: {groups: [2, 4, 8, 16, 32], min_tile: 128}", "cta_orders.sm_90.groups",
     "at most 4 items, got 5"),
    ("  sm_90: {groups: [8]}", "cta_orders.sm_90", "missing key 'min_tile'"),
    ("  sm_90: {groups: [8], min_tile: 8}", "cta_orders.sm_90.min_tile",
     "must be in [16, 1024], got 8"),
    ("  sm_90: {groups: [8], min_tile: 128, order: column}", "cta_orders.sm_90.order",
     "unknown key; valid: groups, min_tile"),
    ("  gfx9000: {groups: [8], min_tile: 128}", "cta_orders.gfx9000", "unknown target"),
])
def test_cta_order_errors_name_file_line_and_field(tmp_path, new, field, problem):
    old = "  sm_90: {groups: [8], min_tile: 128}"
    assert old in SHIPPED
    text = SHIPPED.replace(old, new, 1)
    line = text.splitlines().index(new) + 1
    p = _write(tmp_path, text)
    with pytest.raises(GeometryFileError) as e:
        load(p)
    assert str(e.value).startswith(f"{p}:{line}: {field}: "), str(e.value)
    assert problem in str(e.value)


_DW = "  - [3, 64, 4, 2]   # the 3x3 of MobileNetV2 / EfficientNet (and every smaller filter)"


@pytest.mark.parametrize("new, field, problem", [
    ("  - [3, 64, 4]", "depthwise[0]",
     "expected 4 or 5 integers [T, tile_n, tile_k, vec, wo_run], got 3"),
    ("  - [3, 64, 4, 2, 1, 1]", "depthwise[0]",
     "expected 4 or 5 integers [T, tile_n, tile_k, vec, wo_run], got 6"),
    ("  - [3, 64, 4, 2, 3]", "depthwise[0][4]", "wo_run 3 not one of (1, 2, 4)"),
    ("  - [3, 64, 4, 2, 8]", "depthwise[0][4]", "must be in [1, 4], got 8"),
    ("  - [3, 64, 4, 2, x]", "depthwise[0][4]", "expected an integer in [1, 4], got a string 'x'"),
    ("  - [10, 64, 4, 2]", "depthwise[0][0]", "must be in [1, 9], got 10"),
    ("  - [3, 8, 4, 2]", "depthwise[0][1]", "must be in [16, 1024], got 8"),
    ("  - [3, 64, 65, 2]", "depthwise[0][2]", "must be in [1, 64], got 65"),
    ("  - [3, 64, 4, 3]", "depthwise[0][3]", "vec 3 not one of (1, 2, 4, 8)"),
    ("  - [3, 64, 4, -2]", "depthwise[0][3]", "must be in [1, 8], got -2"),
    ("  - [3, 32, 4, 1]", "depthwise[1]", "repeated entry [3, 32, 4, 1, 1]"),
    ("  - {T: 3}", "depthwise[0]", "expected a list, got a mapping"),
])
def test_depthwise_entry_errors_name_file_line_and_field(tmp_path, new, field, problem):
    assert _DW in SHIPPED
    text = SHIPPED.replace(_DW, new, 1)
    lines = text.splitlines()
    line = max(i for i, ln in enumerate(lines, 1) if ln.startswith(new))  # the later repeat
    p = _write(tmp_path, text)
    with pytest.raises(GeometryFileError) as e:
        load(p)
    assert str(e.value) == f"{p}:{line}: {field}: {problem}"


def test_depthwise_entries_are_the_shipped_twenty_two_and_optional(tmp_path):
    one = ((3, 64, 4, 2), (3, 32, 4, 1), (5, 64, 4, 2), (5, 64, 2, 1), (7, 64, 2, 1),
           (3, 32, 8, 1), (3, 16, 16, 1), (3, 16, 32, 2), (5, 32, 8, 1), (3, 16, 64, 4),
           (3, 32, 32, 4), (5, 16, 16, 2), (5, 16, 32, 4), (5, 32, 16, 4), (3, 16, 64, 8),
           (3, 32, 32, 8))
    runs = ((3, 16, 64, 4, 4), (3, 32, 32, 4, 4), (3, 32, 32, 8, 2), (3, 16, 64, 8, 2),
            (5, 32, 16, 4, 2), (5, 16, 32, 2, 4))
    assert load().depthwise == tuple((*e, 1) for e in one) + runs  # four fields: wo_run 1
    head = SHIPPED.index("\ndepthwise:")
    assert load(_write(tmp_path, SHIPPED[:head] + "\n")).depthwise == ()
    many = SHIPPED[:head] + "\ndepthwise:\n" + "".join(
        f"  - [3, {16 + i}, 4, 1]\n" for i in range(25))
    with pytest.raises(GeometryFileError, match=r": depthwise: at most 24 items, got 25"):
        load(_write(tmp_path, many))


_SC = "  - [3, 3, 32, 8, 1]    # MobileNetV2's stem (K 32, C 3, 3x3 stride 2), on every target"


@pytest.mark.parametrize("new, field, problem", [
    ("  - [3, 3, 32, 8]", "small_c[0]", "expected 5 integers [T, C, tile_n, tile_k, vec], "
                                        "got 4"),
    ("  - [10, 3, 32, 8, 1]", "small_c[0][0]", "must be in [1, 9], got 10"),
    ("  - [3, 5, 32, 8, 1]", "small_c[0][1]", "must be in [1, 4], got 5"),
    ("  - [3, 0, 32, 8, 1]", "small_c[0][1]", "must be in [1, 4], got 0"),
    ("  - [3, 3, 8, 8, 1]", "small_c[0][2]", "must be in [16, 1024], got 8"),
    ("  - [3, 3, 32, 65, 1]", "small_c[0][3]", "must be in [1, 64], got 65"),
    ("  - [3, 3, 32, 8, 3]", "small_c[0][4]", "vec 3 not one of (1, 2, 4, 8)"),
    ("  - [3, 3, 32, 8, 1e3]", "small_c[0][4]", "expected an integer"),
    ("  - [3, 3, 16, 16, 1]", "small_c[1]", "repeated entry [3, 3, 16, 16, 1]"),
    ("  - {T: 3}", "small_c[0]", "expected a list, got a mapping"),
])
def test_small_c_entry_errors_name_file_line_and_field(tmp_path, new, field, problem):
    assert _SC in SHIPPED
    text = SHIPPED.replace(_SC, new, 1)
    lines = text.splitlines()
    line = max(i for i, ln in enumerate(lines, 1) if ln.startswith(new))  # the later repeat
    p = _write(tmp_path, text)
    with pytest.raises(GeometryFileError) as e:
        load(p)
    assert str(e.value).startswith(f"{p}:{line}: {field}: {problem}")


def test_small_c_entries_are_the_shipped_seven_and_optional(tmp_path):
    assert load().small_c == ((3, 3, 32, 8, 1), (3, 3, 16, 16, 1), (3, 3, 16, 32, 2),
                              (3, 3, 16, 32, 4), (3, 4, 16, 16, 1), (3, 4, 16, 16, 2),
                              (5, 3, 16, 8, 1))
    head = SHIPPED.index("\nsmall_c:")
    assert load(_write(tmp_path, SHIPPED[:head] + "\n")).small_c == ()
    many = SHIPPED[:head] + "\nsmall_c:\n" + "".join(
        f"  - [3, 3, {16 + i}, 4, 1]\n" for i in range(25))
    with pytest.raises(GeometryFileError, match=r": small_c: at most 24 items, got 25"):
        load(_write(tmp_path, many))


def test_cta_orders_fold_into_the_target_budgets_and_leave_the_others_alone():
    d = load(default_path())
    lim = d.limits_for("sm_90")
    assert (lim.cta_groups, lim.cta_group_min_tile) == ((8,), 128)
    assert lim.max_acc_per_lane == 128  # its filters kept
    assert d.limits_for("gfx1250").cta_groups == ()  # named by no cta_orders entry
    assert d.limits_for("gfx1201") == d.limits and d.limits.cta_groups == ()


def test_cover_entry_on_no_ladder_is_an_error(tmp_path):
    text = SHIPPED.replace("  - geometry: [32, 32, 32, 1, 1]", "  - geometry: [128, 128, 64, 1, 1]")
    with pytest.raises(GeometryFileError, match=r"cover\[0\].geometry: on no target's ladder"):
        load(_write(tmp_path, text))


def test_cli_reports_a_bad_file_in_one_line_with_exit_2(tmp_path):
    p = _write(tmp_path, SHIPPED.replace("schema: 1", "schema: 7"))
    r = CliRunner().invoke(main, ["count", "--geometries", str(p)])
    assert r.exit_code == 2
    line = SHIPPED.splitlines().index("schema: 1") + 1
    assert r.output == f"error: {p}:{line}: schema: unsupported schema 7 (this tool reads 1)\n"


def test_not_yaml(tmp_path):
    p = _write(tmp_path, "ladder: [1, 2\n")
    with pytest.raises(GeometryFileError, match=r":2: not valid YAML"):
        load(p)


def test_ws_replicas_bound_is_the_split_degree_cap():
    """One workspace replica per split slice at most: past MAX_DEGREE none is ever used."""
    from wgradcache.jobs.geometries import WS_REPLICAS_RANGE
    from wgradcache.wgrad.split_k import MAX_DEGREE

    assert WS_REPLICAS_RANGE == (1, MAX_DEGREE)


def test_the_widest_ladder_the_bounds_allow_still_loads(tmp_path):
    """8 values per axis at the ends of the ranges, every budget at its top: a file the
    bounds admit is one the loader and the walk can take."""
    import re

    from wgradcache.jobs.geometries import LIMIT_RANGES, TILE_RANGE, WARP_RANGE

    text = SHIPPED
    tiles = [TILE_RANGE[0], 32, 48, 64, 96, 128, 256, TILE_RANGE[1]]
    warps = [WARP_RANGE[0], 2, 3, 4, 8, 16, 24, WARP_RANGE[1]]
    for ax in ("tile_m", "tile_n", "tile_k", "warp_m", "warp_n"):
        text = re.sub(rf"  {ax}: \[.*\]", f"  {ax}: {tiles if ax[0] == 't' else warps}", text)
    for k, (lo, hi) in LIMIT_RANGES.items():
        text = re.sub(rf"(\n +{k}): \d+", rf"\1: {lo if k == 'min_block_size' else hi}", text)
    d = load(_write(tmp_path, text))
    assert len(d.ladder_geometries()) == 8 ** 5
    assert d.limits_for("gfx1151").max_acc_per_lane == LIMIT_RANGES["max_acc_per_lane"][1]


@pytest.mark.parametrize("new, field, problem", [
    ("  sm_90: {counts: [2, 3], min_tile: 128}", "stages.sm_90.counts[0]",
     "must be in [3, 4], got 2"),
    ("  sm_90: {counts: [5], min_tile: 128}", "stages.sm_90.counts[0]",
     "must be in [3, 4], got 5"),
    ("  sm_90: {counts: [3, 3], min_tile: 128}", "stages.sm_90.counts", "repeated value"),
    ("  sm_90: {counts: [3]}", "stages.sm_90", "missing key 'min_tile'"),
    ("  sm_90: {counts: [3], min_tile: 8}", "stages.sm_90.min_tile",
     "must be in [16, 1024], got 8"),
    ("  sm_90: {counts: [3], min_tile: 128, depth: 2}", "stages.sm_90.depth",
     "unknown key; valid: counts, min_tile"),
    ("  gfx942: {counts: [3], min_tile: 128}", "stages.gfx942",
     "unknown target with an async loop"),
])
def test_stages_errors_name_file_line_and_field(tmp_path, new, field, problem):
    old = "  sm_90: {counts: [3, 4], min_tile: 128}"
    assert old in SHIPPED
    text = SHIPPED.replace(old, new, 1)
    line = text.splitlines().index(new) + 1
    p = _write(tmp_path, text)
    with pytest.raises(GeometryFileError) as e:
        load(p)
    assert str(e.value).startswith(f"{p}:{line}: {field}: "), str(e.value)
    assert problem in str(e.value)


def test_stages_fold_into_the_target_budgets_and_leave_the_others_alone():
    d = load(default_path())
    assert (d.limits_for("gfx1250").stages, d.limits_for("gfx1250").stages_min_tile) == (
        (3,), 128)
    assert (d.limits_for("sm_90").stages, d.limits_for("sm_90").stages_min_tile) == (
        (3, 4), 128)
    assert d.limits_for("sm_90").cta_groups == (8,)  # its CTA orders kept
    assert d.limits_for("gfx1250").max_acc_per_lane == 128  # its filters kept
    assert d.limits_for("gfx1201") == d.limits and d.limits.stages == ()
