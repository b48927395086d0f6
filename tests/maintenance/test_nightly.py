"""Nightly pieces: refresh twice, shards merged == one build, conflicts refused, a Dask
build == the loky build, gc under a size bound."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

from tests.conftest import tune_doc
from wgradcache.cache.gc import GcOptions, gc, parse_size
from wgradcache.cache.merge import merge
from wgradcache.cache.store import TargetCache
from wgradcache.pipeline.build import BuildRequest, build
from wgradcache.pipeline.refresh import Plan, RefreshRequest, refresh
from wgradcache.pipeline.verify import VerifyRequest, verify


def _snapshot(root, dtype: str | None = None) -> dict:
    """identity -> (entry without its publish time, blob bytes)."""
    c = TargetCache(root, "gfx1250")
    out = {}
    for ik, e in c.iter_entries():
        if dtype and e.dtype != dtype:
            continue
        out[ik] = (replace(e, published=0.0), c.read_blob(e.blob))
    return out


def test_refresh_twice_builds_nothing_the_second_time(small_cache, tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(small_cache["cache"], cache)
    plan = Plan(targets=("gfx1250",), dtypes=("fp16", "bf16"), variants=(),
                verify_level="structure", verify_sample=1.0, max_size=None, job_timeout=300)
    geo = str(small_cache["geometries"])
    first = refresh(RefreshRequest(plan, str(cache), tmp_path / "report", geometries_file=geo))
    second = refresh(RefreshRequest(plan, str(cache), tmp_path / "report", geometries_file=geo))
    for doc in (first, second):
        assert doc["ok"] is True
        t = doc["targets"]["gfx1250"]
        assert (t["jobs"], t["built"], t["relinked"], t["up_to_date"], t["failed"]) == (
            18, 0, 0, 18, 0)
        assert t["verify"]["ok"] and t["verify"]["checked"] == 20  # + 2 stage-2 kernels
    assert second["targets"]["gfx1250"]["changed"] == {
        "added": 0, "removed": 0, "toolchain": False, "generator": False, "first_run": False}
    md = (tmp_path / "report" / "report.md").read_text()
    assert "Nothing was built: every job was up to date." in md
    assert "Since the last run: 0 entries added, 0 removed" in md


def test_refresh_judges_each_target_by_its_own_toolchain(small_cache, tmp_path):
    """sm_90's toolchain is ptxas, not LLD: the report records each target's digest, and a
    ptxas change shows as a toolchain change of sm_90 only (the AMD digest, which the
    report compared before, says nothing about it)."""
    from wgradcache.pipeline.workers import codegen_context

    plan = Plan(targets=("gfx1250", "sm_90"), dtypes=("fp16",), variants=(),
                verify_level="integrity", verify_sample=1.0, max_size=None, job_timeout=300)
    geo = str(small_cache["geometries"])
    cache, report = tmp_path / "cache", tmp_path / "report"
    first = refresh(RefreshRequest(plan, str(cache), report, geometries_file=geo))
    assert first["ok"] is True
    digests = {t: first["targets"][t]["toolchain_digest"] for t in plan.targets}
    assert digests == {t: codegen_context(t)[2] for t in plan.targets}
    assert digests["sm_90"] != digests["gfx1250"] == first["toolchain_digest"]
    doc = json.loads((report / "report.json").read_text())
    doc["targets"]["sm_90"]["toolchain_digest"] = "0" * 64  # as if ptxas had changed
    (report / "report.json").write_text(json.dumps(doc))
    second = refresh(RefreshRequest(plan, str(cache), report, geometries_file=geo))
    assert {t: second["targets"][t]["changed"]["toolchain"] for t in plan.targets} == {
        "gfx1250": False, "sm_90": True}
    assert second["targets"]["sm_90"]["up_to_date"] == 9  # 5 sync + 4 cp.async kernels


def test_three_shards_merged_equal_one_build(small_cache, tmp_path):
    geo = str(small_cache["geometries"])
    shards = []
    for i in range(3):
        root = tmp_path / f"shard{i}"
        s = build(BuildRequest(target="gfx1250", dtypes=("fp16", "bf16"), shard=(i, 3),
                               geometries_file=geo, cache_dir=str(root), jobs=2))
        assert s.failed == 0 and 4 <= s.jobs <= 8  # balanced by expected cost
        shards.append(root)
    merged = tmp_path / "merged"
    rep = merge(shards, merged)
    assert rep.ok and rep.copied_entries == 18
    assert _snapshot(merged) == _snapshot(small_cache["cache"])
    again = merge(shards, merged)  # idempotent
    assert (again.ok, again.copied_entries, again.skipped) == (True, 0, 18)


def test_merging_a_conflicting_cache_is_refused_and_writes_nothing(small_cache, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(small_cache["cache"], other)
    c = TargetCache(other, "gfx1250")
    ik, e = next(iter(c.iter_entries()))
    data = bytearray(c.read_blob(e.blob))
    data[-1] ^= 0xFF
    new = c.write_blob("0" * 64, bytes(data))
    c.write_entry(replace(e, blob=new.key, blob_size=new.size, blob_sha256=new.sha256))
    dest = tmp_path / "dest"
    shutil.copytree(small_cache["cache"], dest)
    before = _snapshot(dest)
    rep = merge([other], dest)
    assert not rep.ok
    assert [(x["identity_key"], x["reason"].split(":")[0]) for x in rep.conflicts] == [
        (ik, "same identity, different content")]
    assert _snapshot(dest) == before


def test_dask_local_cluster_build_equals_the_loky_build(small_cache, tmp_path):
    from distributed import Client, LocalCluster, get_task_stream

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster, Client(cluster) as client:
        with get_task_stream(client) as ts:
            s = build(BuildRequest(target="gfx1250", dtypes=("fp16",), backend="dask",
                                   scheduler=cluster.scheduler_address, jobs=2,
                                   geometries_file=str(small_cache["geometries"]),
                                   cache_dir=str(tmp_path / "cache")))
        assert len(ts.data) >= 9  # the work ran on the cluster's workers
    assert (s.jobs, s.failed) == (9, 0)
    assert _snapshot(tmp_path / "cache") == _snapshot(small_cache["cache"], "fp16")


def test_gc_under_a_size_bound_keeps_what_remains_verifiable(small_cache, tmp_path):
    root = tmp_path / "cache"
    shutil.copytree(small_cache["cache"], root)
    c = TargetCache(root, "gfx1250")
    total = sum(c.blob_path(k).stat().st_size for k in c.blob_keys())
    bound = total // 2
    stamps = {key: 1000.0 + i for i, key in enumerate(c.blob_keys())}  # a known LRU order
    for key, when in stamps.items():
        c.stamp_used(key, when)
    stage2 = {e.blob for e in c.stage2_entries().values()}
    assert len(stage2) == 2
    rep = gc(c, None, GcOptions(max_size=bound))
    assert rep.bytes_after <= bound < rep.bytes_before == total
    kept = c.blob_keys()
    assert all(c.last_used(k) == 0.0 for k in rep.evicted_blobs)  # stamps removed with blobs
    # Least recently used first; a stage-2 kernel goes only after the blobs that need it.
    assert (max(stamps[k] for k in rep.evicted_blobs if k not in stage2)
            < min(c.last_used(k) for k in kept if k not in stage2))
    assert sum(c.blob_path(k).stat().st_size for k in kept) <= bound
    v = verify(VerifyRequest(cache_dir=str(root), level="structure", device="emulator",
                             geometries_file=str(small_cache["geometries"])))
    assert v.ok, v.failures
    assert v.targets["gfx1250"]["complete"] is False


def test_gc_keeps_a_stage2_kernel_while_a_two_stage_blob_needs_it(small_cache, tmp_path):
    """The stage-2 kernels are the least recently stamped here, yet a bound that needs one
    eviction takes an ordinary blob: each stage-2 kernel is used when its users are."""
    root = tmp_path / "cache"
    shutil.copytree(small_cache["cache"], root)
    c = TargetCache(root, "gfx1250")
    stage2 = {e.blob for e in c.stage2_entries().values()}
    for i, key in enumerate(sorted(c.blob_keys(), key=lambda k: (k not in stage2, k))):
        c.stamp_used(key, 1000.0 + i)
    total = sum(c.blob_path(k).stat().st_size for k in c.blob_keys())
    rep = gc(c, None, GcOptions(max_size=total - 1))
    assert len(rep.evicted_blobs) == 1 and rep.evicted_blobs[0] not in stage2
    assert stage2 <= set(c.blob_keys()) and len(c.stage2_entries()) == 2
    v = verify(VerifyRequest(cache_dir=str(root), level="structure", device="emulator",
                             geometries_file=str(small_cache["geometries"])))
    assert v.ok, v.failures


def test_parse_size():
    assert parse_size("2G") == 2 << 30
    assert parse_size("500m") == 500 << 20
    assert parse_size("123") == 123


def test_load_plan_reads_the_shipped_plan_and_names_each_bad_field(tmp_path):
    import pytest

    from wgradcache.pipeline.refresh import PlanError, load_plan

    plan = load_plan("jobs/nightly.yaml")
    assert plan.targets and plan.verify_level in ("integrity", "structure", "reproduce",
                                                   "numerics")
    p = tmp_path / "plan.yaml"
    for text, reason in [
        ("targets: [gfx1250]\nextra: 1\n", "2: extra: unknown key; valid: targets, dtypes, "
                                           "variants, verify, max_size, job_timeout"),
        ("targets: []\n", "1: targets: name at least one target"),
        ("targets: gfx1250\n", "1: targets: expected a list, got a string 'gfx1250'"),
        ("targets: [gfx1250]\ndtypes: [fp8]\n", "2: dtypes[0]: unknown 'fp8'; valid: "),
        ("targets: [gfx1250]\nverify: {level: all}\n", "2: verify.level: unknown 'all'; valid: "
                                                      "integrity, structure, reproduce, "
                                                      "numerics"),
        ("targets: [gfx1250]\nverify: {sample: 2}\n", "2: verify.sample: must be in (0, 1], "
                                                     "got 2"),
        ("targets: [gfx1250]\nmax_size: 3KM\n", "2: max_size: size '3KM': unknown unit 'km'"),
    ]:
        p.write_text(text)
        with pytest.raises(PlanError) as e:
            load_plan(p)
        assert str(e.value).startswith(f"{p}:{reason}"), str(e.value)
    p.write_text("targets: [gfx1250]\ndtypes: [fp16]\nverify: {level: integrity, sample: 0.5}"
                 "\nmax_size: 2G\njob_timeout: 60\n")
    assert load_plan(p) == Plan(targets=("gfx1250",), dtypes=("fp16",), variants=(),
                                verify_level="integrity", verify_sample=0.5,
                                max_size=2 << 30, job_timeout=60.0)


def _tuned(cache, tmp_path, median_ms="0.5"):
    """A ``tune --json`` file of one row of a kernel the small cache holds."""
    doc = tune_doc(cache)
    p = tmp_path / "device" / "tuned.json"
    p.parent.mkdir(exist_ok=True)
    p.write_text(json.dumps(doc).replace('"median_ms": 0.5', f'"median_ms": {median_ms}'))
    return p


def test_the_plan_names_device_timings_and_refresh_imports_them(small_cache, tmp_path):
    """The build machine has no GPU: timings measured on a device come in through the plan,
    imported after tonight's build and gc, each checked as ``tune --import`` checks it."""
    from wgradcache.pipeline.refresh import load_plan

    cache = tmp_path / "cache"
    shutil.copytree(small_cache["cache"], cache)
    _tuned(cache, tmp_path)
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text("targets: [gfx1250]\ndtypes: [fp16]\nverify: {level: integrity}\n"
                         "timings:\n  gfx1250: [device/tuned.json]\n")
    plan = load_plan(plan_file)
    assert plan.timings == (("gfx1250", str(tmp_path / "device" / "tuned.json")),)
    geo = str(small_cache["geometries"])
    doc = refresh(RefreshRequest(plan, str(cache), tmp_path / "report", geometries_file=geo))
    assert doc["ok"] is True
    (imp,) = doc["targets"]["gfx1250"]["timings"]
    assert (imp["imported"], imp["added"], imp["rows"]) == (1, 1, 1)
    assert imp["device_class"].startswith("amd-fake-gpu-")
    assert TargetCache(cache, "gfx1250").timing_classes() == [imp["device_class"]]
    md = (tmp_path / "report" / "report.md").read_text()
    assert (f"- timings `{tmp_path / 'device' / 'tuned.json'}`: 1 rows read, 1 added to "
            f"{imp['device_class']} (1 rows); fit: ") in md


def test_a_bad_planned_timings_file_fails_the_night_and_imports_nothing(small_cache, tmp_path):
    from wgradcache.pipeline.refresh import load_plan

    cache = tmp_path / "cache"
    shutil.copytree(small_cache["cache"], cache)
    bad = _tuned(cache, tmp_path, median_ms="NaN")
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text("targets: [gfx1250]\ndtypes: [fp16]\nverify: {level: integrity}\n"
                         "timings: {gfx1250: [device/tuned.json, device/link.json]}\n")
    (tmp_path / "device" / "link.json").symlink_to("/etc/passwd")
    geo = str(small_cache["geometries"])
    doc = refresh(RefreshRequest(load_plan(plan_file), str(cache), tmp_path / "report",
                                 geometries_file=geo))
    assert doc["ok"] is False
    assert doc["targets"]["gfx1250"]["timings"] == [
        {"file": str(bad), "refused": f"{bad}: not valid JSON: NaN is not a number this file "
                                      "may hold"},
        {"file": str(tmp_path / "device" / "link.json"),
         "refused": f"{tmp_path / 'device' / 'link.json'}: cannot read: a symbolic link, not a "
                    "regular file (not followed)"}]
    assert not (cache / "gfx1250" / "timings").exists()
    md = (tmp_path / "report" / "report.md").read_text()
    assert md.startswith("# wgradcache nightly refresh: FAILED\n")
    assert f"- timings REFUSED: {bad}: not valid JSON: NaN" in md


def test_the_plans_timings_are_checked_where_they_are_read(tmp_path):
    import pytest

    from wgradcache.pipeline.refresh import PlanError, load_plan

    p = tmp_path / "plan.yaml"
    for text, reason in [
        ("targets: [gfx1250]\ntimings: {sm_90: [t.json]}\n",
         "2: timings.sm_90: unknown target (not in targets); valid: gfx1250"),
        ("targets: [gfx1250]\ntimings: [t.json]\n", "2: timings: expected a mapping, got a list"),
        ("targets: [gfx1250]\ntimings: {gfx1250: t.json}\n",
         "2: timings.gfx1250: expected a list, got a string 't.json'"),
        ("targets: [gfx1250]\ntimings: {gfx1250: [1]}\n",
         "2: timings.gfx1250[0]: expected a string, got an integer 1"),
        ("targets: [gfx1250]\ntimings: {gfx1250: ['']}\n",
         "2: timings.gfx1250[0]: expected a non-empty string"),
        ("targets: [gfx1250]\ntimings: {gfx1250: [" + ", ".join(["t.json"] * 17) + "]}\n",
         "2: timings.gfx1250: at most 16 items, got 17"),
    ]:
        p.write_text(text)
        with pytest.raises(PlanError) as e:
            load_plan(p)
        assert str(e.value).startswith(f"{p}:{reason}"), str(e.value)
    p.write_text("targets: [gfx1250]\ntimings: {gfx1250: [/abs/t.json, rel/t.json]}\n")
    assert load_plan(p).timings == (("gfx1250", "/abs/t.json"),
                                    ("gfx1250", str(tmp_path / "rel" / "t.json")))
