"""Timings kept in the cache without a compiler: the one reader/writer, its path, gc, merge,
verify and show over synthetic entries (tests/cache/records.py)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tests.cache.records import entry, ik, key
from wgradcache.cache.entry import CorruptEntry
from wgradcache.cache.gc import GcOptions, gc
from wgradcache.cache.merge import merge
from wgradcache.cache.store import TargetCache
from wgradcache.cache.timings import (
    DeviceClass,
    TimingRow,
    TimingsFile,
    read_timings,
    timings_bytes,
    timings_json,
)

H100 = DeviceClass("NVIDIA H100 80GB HBM3", 132, "13000", "12.9")


def _row(ik: str, blob: str, ms: float = 0.5, when: float = 100.0, problem="32,64,56,56,64,1,1",
         degree: int = 1) -> TimingRow:
    return TimingRow(ik, blob, problem, "fp16", degree, ms, 0.01, 10, when)


def _cache(root, names=("a", "b")) -> TargetCache:
    c = TargetCache(root, "gfx1250")
    for n in names:
        ref = c.write_blob(key(f"blob-{n}"), f"blob {n}".encode())
        c.write_entry(entry(n, blob=ref.key, blob_size=ref.size, blob_sha256=ref.sha256))
    return c


def test_the_file_name_is_the_class_slug_and_round_trips(tmp_path):
    c = _cache(tmp_path)
    tf = TimingsFile(H100, (_row(ik("a"), key("blob-a")),))
    with c.lock():
        c.write_timings(tf)
    slug = H100.slug()
    assert slug.startswith("nvidia-h100-80gb-hbm3-") and len(slug) == 22 + 12
    assert c.timing_classes() == [slug]
    assert (tmp_path / "gfx1250" / "timings" / f"{slug}.json").is_file()
    assert c.read_timings(slug) == tf
    # another driver is another class, another file
    assert DeviceClass(H100.name, 132, "13010", "12.9").slug() != slug


def test_a_name_from_input_never_becomes_a_path(tmp_path):
    c = _cache(tmp_path)
    for bad in ("../../etc/passwd", "x/y", "", "nvidia-h100-0123456789ab/../x"):
        with pytest.raises(CorruptEntry, match="is not a device class"):
            c.timings_path(bad)
    # a hostile device name folds to a safe slug
    assert DeviceClass("..  ..(x)", 1, "", "").slug().startswith("x-")
    doc = timings_json(TimingsFile(H100))
    doc["device"]["name"] = "../../etc"
    with pytest.raises(CorruptEntry) as e:
        read_timings(json.dumps(doc), "f.json")
    assert str(e.value) == ("f.json: corrupt: device.name: '../../etc' is not a device name "
                            "(1 to 100 of A-Z a-z 0-9 space . _ ( ) + -)")


def test_graph_timed_rows_are_a_class_of_their_own_and_older_files_keep_their_name(tmp_path):
    """Rows timed from the host (before 12-07) measured the host for short kernels: a
    class timed by graph replay is another class and another file, while a file of the
    earlier method reads as it was written (no ``timing`` field) under its old name."""
    old = DeviceClass("NVIDIA H100 80GB HBM3", 132, "13000", "13.3.1")
    assert old.slug() == "nvidia-h100-80gb-hbm3-2ad914e14e56"  # the H100 file of 12-07
    new = replace(old, timing="graph")
    assert new.slug() != old.slug() and new.slug().startswith("nvidia-h100-80gb-hbm3-")
    assert old.describe().endswith("runtime 13.3.1; timed from the host)")
    assert new.describe().endswith("runtime 13.3.1; graph replay)")
    assert "timing" not in timings_json(TimingsFile(old))["device"]
    assert timings_json(TimingsFile(new))["device"]["timing"] == "graph"
    c = _cache(tmp_path)
    with c.lock():
        c.write_timings(TimingsFile(old, (_row(ik("a"), key("blob-a")),)))
        c.write_timings(TimingsFile(new, (_row(ik("a"), key("blob-a"), ms=0.25),)))
    assert sorted(c.timing_classes()) == sorted([old.slug(), new.slug()])
    assert c.read_timings(old.slug()).device == old
    assert [r.median_ms for r in c.read_timings(new.slug()).rows] == [0.25]
    for bad, shown in (("eager", "'eager'"), ("../x", "'../x'"), (1, "'1'"), (None, "'None'")):
        doc = timings_json(TimingsFile(new))
        doc["device"]["timing"] = bad
        with pytest.raises(CorruptEntry) as e:
            read_timings(json.dumps(doc), "f.json")
        assert str(e.value) == (f"f.json: corrupt: device.timing: {shown} is not a timing "
                                "method (graph, or empty)")


@pytest.mark.parametrize("field, value, why", [
    ("median_ms", -1.0, "rows[0].median_ms: -1.0 is not a number in (0, 1e+06]"),
    ("median_ms", 0, "rows[0].median_ms: 0 is not a number in (0, 1e+06]"),
    ("median_ms", 1e7, "rows[0].median_ms: 10000000.0 is not a number in (0, 1e+06]"),
    ("median_ms", "1", "rows[0].median_ms: 1 is not a number in (0, 1e+06]"),
    ("spread_ms", -0.1, "rows[0].spread_ms: -0.1 is not a number in [0, 1e+06]"),
    ("iterations", 0, "rows[0].iterations: 0 is not an integer in [1, 1000000]"),
    ("iterations", True, "rows[0].iterations: True is not an integer in [1, 1000000]"),
    ("degree", 70000, "rows[0].degree: 70000 is not an integer in [1, 65535]"),
    ("blob", "../x", "rows[0].blob: '../x' is not a key (64 hex digits)"),
    ("problem", "32,64,56,56,64,1,1,1", "rows[0].problem: 32,64,56,56,64,1,1,1 is not in its "
                                         "short form 32,64,56,56,64,1,1"),
    ("extra", 1, "rows[0]: unknown field 'extra'"),
])
def test_the_reader_refuses_a_bad_row_in_one_line(field, value, why):
    doc = timings_json(TimingsFile(H100, (_row(ik("a"), key("blob-a")),)))
    doc["rows"][0][field] = value
    with pytest.raises(CorruptEntry) as e:
        read_timings(json.dumps(doc), "f.json")
    assert str(e.value) == f"f.json: corrupt: {why}"


def test_nan_and_a_file_holding_another_class(tmp_path):
    text = timings_bytes(TimingsFile(H100, (_row(ik("a"), key("blob-a")),))).decode()
    with pytest.raises(CorruptEntry, match="NaN is not a finite number"):
        read_timings(text.replace('"median_ms":0.5', '"median_ms":NaN'), "f.json")
    c = _cache(tmp_path)
    other = DeviceClass("NVIDIA H200", 132, "13000", "12.9")
    path = c.timings_path(other.slug())
    path.parent.mkdir(parents=True)
    path.write_bytes(timings_bytes(TimingsFile(H100)))
    with pytest.raises(CorruptEntry, match="its device class is nvidia-h100-80gb-hbm3-"):
        c.read_timings(other.slug())


def test_gc_drops_rows_of_removed_kernels_and_of_older_blobs(tmp_path):
    c = _cache(tmp_path, ("a", "b", "c"))
    rows = (_row(ik("a"), key("blob-a")), _row(ik("b"), key("blob-b")),
            _row(ik("b"), key("old-blob")), _row(ik("c"), key("blob-c")))
    with c.lock():
        c.write_timings(TimingsFile(H100, rows))
    rep = gc(TargetCache(tmp_path, "gfx1250"), {ik("a"), ik("b")}, GcOptions(orphans=False))
    assert rep.stale_entries == [ik("c")] and rep.timing_rows == 2
    assert c.read_timings(H100.slug()).rows == rows[:2]


def test_merge_unions_rows_and_a_conflict_keeps_the_newer(tmp_path):
    src, dest = _cache(tmp_path / "src"), _cache(tmp_path / "dest")
    a, b = _row(ik("a"), key("blob-a"), 0.5, when=100.0), _row(ik("b"), key("blob-b"))
    newer = replace(a, median_ms=0.4, when=200.0)
    with dest.lock():
        dest.write_timings(TimingsFile(H100, (a,)))
    with src.lock():
        src.write_timings(TimingsFile(H100, (newer, b)))
    rep = merge([tmp_path / "src"], tmp_path / "dest")
    assert rep.ok and rep.copied_timing_rows == 2
    assert set(TargetCache(tmp_path / "dest", "gfx1250").read_timings(H100.slug()).rows) == \
        {newer, b}
    # an older row from a source does not replace the newer one; the merge is a no-op
    with src.lock():
        src.write_timings(TimingsFile(H100, (a,)))
    rep = merge([tmp_path / "src"], tmp_path / "dest")
    assert rep.ok and rep.copied_timing_rows == 0
    assert newer in TargetCache(tmp_path / "dest", "gfx1250").read_timings(H100.slug()).rows


def test_merge_refuses_a_corrupt_timings_file_and_writes_nothing(tmp_path):
    _cache(tmp_path / "src")
    dest = _cache(tmp_path / "dest")
    bad = TargetCache(tmp_path / "src", "gfx1250").timings_path(H100.slug())
    bad.parent.mkdir(parents=True)
    bad.write_text('{"device": 1}')
    rep = merge([tmp_path / "src"], tmp_path / "dest")
    assert not rep.ok
    assert [f.line() for f in rep.findings] == [f"REFUSED {bad}: corrupt: file: no field 'rows'"]
    assert dest.timing_classes() == []


def test_a_class_past_the_row_cap_is_never_written(tmp_path, monkeypatch):
    import wgradcache.cache.timings as timings_mod

    monkeypatch.setattr(timings_mod, "MAX_ROWS", 2)
    c = _cache(tmp_path)
    rows = tuple(_row(ik("a"), key("blob-a"), degree=d) for d in (1, 2, 3))
    with pytest.raises(CorruptEntry) as e, c.lock():
        c.write_timings(TimingsFile(H100, rows))
    assert str(e.value) == (f"{c.timings_path(H100.slug())}: 3 rows for {H100.slug()}, more "
                            "than 2 (`wgradcache gc` drops the stale ones): not written")
    assert c.timing_classes() == []


def test_a_symlinked_timings_folder_is_refused_and_nothing_outside_is_touched(tmp_path):
    from wgradcache.cache.store import CacheRefused

    c = _cache(tmp_path / "c")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / f"{H100.slug()}.json").write_bytes(timings_bytes(TimingsFile(H100)))
    (tmp_path / "c" / "gfx1250" / "timings").symlink_to(outside)
    for call in (c.timing_classes, lambda: c.read_timings(H100.slug()),
                 lambda: gc(TargetCache(tmp_path / "c", "gfx1250"), set())):
        with pytest.raises(CacheRefused, match="a symbolic link, not a directory"):
            call()
    with pytest.raises(CacheRefused), c.lock():
        c.write_timings(TimingsFile(H100, (_row(ik("a"), key("blob-a")),)))
    assert [p.name for p in outside.iterdir()] == [f"{H100.slug()}.json"]
    assert c.entry_keys() == sorted([ik("a"), ik("b")])  # gc removed nothing
