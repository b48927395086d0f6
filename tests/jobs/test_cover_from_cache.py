"""``wgradcache cover --from-cache``: the cover of the timings the cache keeps, on a small
gfx1250 cache of three geometries with synthetic rows (no device). The expected cover is
worked out by hand from ``TIMES``."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from tests.conftest import small_geometries
from wgradcache.cache.store import TargetCache
from wgradcache.cache.timings import DeviceClass, TimingRow, TimingsFile
from wgradcache.cli import main
from wgradcache.model.problem import ConvProblem
from wgradcache.pipeline.build import BuildRequest, build

T = "gfx1250"
DEV = DeviceClass("AMD Fake GPU", 256, "6.4", "6.4")
G1, G2, G3 = (64, 64, 32, 2, 2), (32, 32, 32, 1, 1), (128, 32, 32, 2, 1)
PA, PB, PC = "2,64,8,8,64,1,1", "2,64,8,8,128,1,1", "2,128,8,8,64,1,1"
# Within 1.2x of the best: PA {G1, G2}, PB {G2}, PC {G3}. Greedy: G2 covers two, then G3.
TIMES = {PA: {G1: 1.0, G2: 1.1, G3: 2.0}, PB: {G1: 1.5, G2: 1.0, G3: 1.25},
         PC: {G1: 2.0, G2: 1.5, G3: 1.0}}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("cover_cache")
    geo = small_geometries(root, cover=(G2, G1), extra_ladder=(G3,))
    s = build(BuildRequest(target=T, dtypes=("fp16",), variants=("sync.default.none",),
                           geometries=("t64x64x32-w2x2", "t32x32x32-w1x1", "t128x32x32-w2x1"),
                           geometries_file=str(geo), cache_dir=str(root / "c"), jobs=1))
    assert s.failed == 0
    return root / "c", geo


@pytest.fixture
def cache(built, tmp_path):
    shutil.copytree(built[0], tmp_path / "c")
    c = TargetCache(tmp_path / "c", T)
    by_geom = {}
    for ik, e in c.iter_entries():
        by_geom[tuple(e.identity[k] for k in ("tile_m", "tile_n", "tile_k", "warp_m",
                                                "warp_n"))] = (ik, e.blob)
    assert set(by_geom) == {G1, G2, G3}
    rows = [TimingRow(by_geom[g][0], by_geom[g][1], ConvProblem.parse(p).short(), "fp16", 1,
                      ms, 0.0, 10, 100.0) for p, per in TIMES.items() for g, ms in per.items()]
    # a stale row (another blob than the entry's): were it read, G1 would be PB's best
    rows.append(TimingRow(by_geom[G1][0], "ab" * 32, PB, "fp16", 1, 0.1, 0.0, 10, 100.0))
    with c.lock():
        c.write_timings(TimingsFile(DEV, tuple(rows)))
    return tmp_path / "c"


def _cover(cache, geo, *extra):
    return CliRunner().invoke(main, ["cover", "--from-cache", "--target", T, "--cache-dir",
                                     str(cache), "--geometries", str(geo), *extra])


def test_the_cover_of_the_cache_timings(built, cache):
    r = _cover(cache, built[1], "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [c["geometry"] for c in doc["cover"]] == [list(G2), list(G3)]
    # pairs sorted by name: "2,64,8,8,128,..." before "2,64,8,8,64,..."
    assert [c["new"] for c in doc["cover"]] == [[f"{PB} fp16", f"{PA} fp16"], [f"{PC} fp16"]]
    assert (doc["device_class"], doc["rows"], doc["rows_left_out"]) == (DEV.slug(), 9, 0)
    assert doc["loss"]["cover_ms"] == pytest.approx(1.1 + 1.0 + 1.0)
    assert doc["loss"]["full_ms"] == pytest.approx(3.0)
    r = _cover(cache, built[1], "--size", "1")
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0] == (
        f"cover of {T} from the {T} cache's timings of {DEV.slug()}: 1 geometry keeps 2 of 3 "
        "(layer, dtype) pairs within 1.2x of their best over 3 measured geometries (--size 1)")


def test_rows_at_a_geometry_the_cover_rule_refuses_are_left_out_and_said(cache, tmp_path):
    geo = small_geometries(tmp_path, cover=(G2, G1))  # G3 on no ladder here
    r = _cover(cache, geo, "--json")
    doc = json.loads(r.stdout)
    assert (doc["rows"], doc["rows_left_out"]) == (9, 3)
    # without G3, PC's best is G2's 1.5: G2 alone covers every pair
    assert [c["geometry"] for c in doc["cover"]] == [list(G2)]
    r = _cover(cache, geo)
    assert r.output.splitlines()[-1] == ("left out 3 of 9 current rows: their geometry is no "
                                         "cover geometry of the geometries file (its cover "
                                         "rule refuses it)")


def test_bad_combinations_and_an_empty_cache_are_one_line(built, tmp_path):
    cases = [(["cover"], "cover: give --timings FILE, or --from-cache --target T"),
             (["cover", "--from-cache"], "cover: give --timings FILE, or --from-cache --target T"),
             (["cover", "--timings", "t.json", "--from-cache", "--target", T],
              "cover: give --timings FILE, or --from-cache --target T"),
             (["cover", "--timings", "t.json", "--target", T],
              "cover: --target and --device-class go with --from-cache")]
    for args, line in cases:
        r = CliRunner().invoke(main, args)
        assert (r.exit_code, r.output) == (2, f"error: {line}\n")
    r = _cover(built[0], built[1])  # built: no timings
    assert (r.exit_code, r.output) == (2, f"error: the {T} cache has no timings (`wgradcache "
                                          "tune` measures, `tune --import` takes timings "
                                          "measured elsewhere)\n")
    r = _cover(built[0], built[1], "--device-class", "../x")
    assert r.exit_code == 2 and r.output.startswith("error: --device-class '../x': no timings")
