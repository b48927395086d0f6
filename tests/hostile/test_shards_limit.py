"""--limit, --shard and --geometry: the limit is a filter on the walk applied before
sharding (so the shards of a --limit N walk union to the --limit N build, byte for byte),
and a geometry or shard that cannot be right is one line and exit 2 before anything is
written."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from wgradcache.cache.store import TargetCache
from wgradcache.cli import main
from wgradcache.pipeline.plan import MAX_SHARDS, BuildRequest, parse_shard, select_jobs


def _keys(req: BuildRequest) -> list[str]:
    return [s.identity_key() for s in select_jobs(req)]


@pytest.mark.parametrize(("limit", "n"), [(9, 3), (10, 4), (1, 3), (40, 7)])
def test_the_shards_of_a_limit_partition_that_limit(limit, n):
    """Each shard's jobs come from the first ``limit`` of the walk; together they are
    those jobs, each in exactly one shard (before, each shard took its own first N)."""
    base = BuildRequest(target="gfx1250", dtypes=("fp16",), limit=limit)
    whole = _keys(base)
    assert len(whole) == limit
    shards = [_keys(BuildRequest(target="gfx1250", dtypes=("fp16",), limit=limit,
                                 shard=(i, n))) for i in range(n)]
    assert sorted(k for s in shards for k in s) == sorted(whole)
    assert sum(len(s) for s in shards) == limit  # disjoint


def test_shards_of_limit_9_build_the_limit_9_cache_byte_for_byte(tmp_path):
    args = ["build", "--target", "gfx1250", "--dtype", "fp16", "--limit", "9", "--jobs", "2"]
    r = CliRunner().invoke(main, [*args, "--cache-dir", str(tmp_path / "whole")])
    assert r.exit_code == 0, r.output
    whole = TargetCache(tmp_path / "whole", "gfx1250")
    seen: dict[str, str] = {}
    for i in range(3):
        d = tmp_path / f"shard{i}"
        r = CliRunner().invoke(main, [*args, "--shard", f"{i}/3", "--cache-dir", str(d)])
        assert r.exit_code == 0, r.output
        for ik, e in TargetCache(d, "gfx1250").iter_entries():
            assert ik not in seen, f"{e.label} in shard {seen.get(ik)} and shard {i}"
            seen[ik] = str(i)
            mine = whole.read_entry(ik)
            assert mine is not None, f"{e.label}: built by shard {i}, not by --limit 9"
            assert (e.blob, e.blob_sha256) == (mine.blob, mine.blob_sha256)
            assert TargetCache(d, "gfx1250").read_blob(e.blob) == whole.read_blob(mine.blob)
    assert sorted(seen) == whole.entry_keys() and len(seen) == 9


def _refused(tmp_path, *args: str) -> str:
    """Run build with ``args``; assert one line on stderr, exit 2 and nothing created."""
    cache_dir = tmp_path / "cache"
    r = CliRunner().invoke(main, ["build", "--target", "gfx1250", "--cache-dir",
                                  str(cache_dir), *args])
    assert r.exit_code == 2, r.output
    assert len(r.stderr.splitlines()) == 1, r.stderr
    assert not cache_dir.exists()  # no .lock, no stats.jsonl, no target folder
    return r.stderr.strip()


def test_an_unknown_geometry_is_refused_naming_close_ones(tmp_path):
    msg = _refused(tmp_path, "--geometry", "t64x64x32-w2x3")
    assert msg.startswith("error: geometry 't64x64x32-w2x3' matches no job of gfx1250")
    assert "t64x64x32-w2x2" in msg.split("close:")[1]


def test_a_nonsense_geometry_is_refused_before_anything_is_written(tmp_path):
    msg = _refused(tmp_path, "--geometry", "t32x32x32-w1x1", "--geometry", "nonsense")
    assert "geometry 'nonsense' matches no job of gfx1250" in msg
    assert "wgradcache count --list" in msg  # nothing close: where the labels are


def test_a_geometry_outside_the_selected_variants_is_refused(tmp_path):
    """t32x32x32-w2x2 is a ladder geometry but not a cover one: no two-stage job."""
    sel = ["--variant", "sync.default.two_stage", "--dtype", "fp16"]
    assert select_jobs(BuildRequest(target="gfx1250", variants=("sync.default.two_stage",),
                                    dtypes=("fp16",), geometries=("t32x32x32-w1x1",)))
    msg = _refused(tmp_path, *sel, "--geometry", "t32x32x32-w2x2")
    assert "matches no job of gfx1250" in msg


@pytest.mark.parametrize(("text", "why"), [
    ("0/99999999999", f"n must be 1 to {MAX_SHARDS}"),
    (f"0/{MAX_SHARDS + 1}", f"n must be 1 to {MAX_SHARDS}"),
    ("0/0", f"n must be 1 to {MAX_SHARDS}"),
    ("3/3", "need 0 <= i < n"),
    ("99999999999999999999/3", "need 0 <= i < n"),
    ("-1/3", "is not i/n"),
    ("1_0/20", "is not i/n"),
    ("\uff10/3", "is not i/n"),  # a full-width zero
    (" 0/3", "is not i/n"),
    ("0/3/4", "is not i/n"),
])
def test_a_shard_out_of_bounds_is_one_line(tmp_path, text, why):
    with pytest.raises(ValueError, match="shard") as e:
        parse_shard(text)
    assert why in str(e.value)
    assert why in _refused(tmp_path, "--shard", text)


def test_the_largest_shard_count_is_accepted_and_cheap():
    assert parse_shard(f"{MAX_SHARDS - 1}/{MAX_SHARDS}") == (MAX_SHARDS - 1, MAX_SHARDS)
    req = BuildRequest(target="gfx1250", shard=(5, MAX_SHARDS))
    assert len(select_jobs(req)) <= 1


def test_a_library_request_with_a_bad_shard_is_refused():
    """BuildRequest does not pass through the CLI's parser: select_jobs checks it too."""
    with pytest.raises(ValueError, match=f"n must be 1 to {MAX_SHARDS}"):
        select_jobs(BuildRequest(target="gfx1250", shard=(0, 10**11)))
