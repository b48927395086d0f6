"""The build: incremental, crash-safe, concurrent, and LLVM exits recorded as failures."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from tests.conftest import small_geometries
from wgradcache.cache.entry import Entry
from wgradcache.cache.store import TargetCache, sha256_bytes
from wgradcache.cli import main
from wgradcache.jobs import count, load, walk
from wgradcache.model.spec import KernelSpec
from wgradcache.pipeline.build import BuildRequest, build, job_cost


def _whole(cache: TargetCache) -> int:
    """Every entry's blob exists with the recorded size and sha256; returns the count."""
    n = 0
    for _ik, e in cache.iter_entries():
        assert isinstance(e, Entry), e
        data = cache.read_blob(e.blob)
        assert len(data) == e.blob_size and sha256_bytes(data) == e.blob_sha256
        n += 1
    return n


def test_small_cache_builds_every_variant(small_cache):
    s = small_cache["summary"]
    jd = load(small_cache["geometries"])
    expected = sum(sum(v.values()) for v in count("gfx1250", ["fp16", "bf16"], None, jd).values())
    assert expected == 18
    assert (s["jobs"], s["built"] + s["relinked"], s["failed"], s["rejected"]) == (18, 18, 0, 0)
    cache = TargetCache(small_cache["cache"], "gfx1250")
    assert _whole(cache) == 18
    assert {e.variant for _, e in cache.iter_entries()} == {
        "sync.default.none", "sync.default.atomic", "sync.cshuffle.none",
        "sync.cshuffle.atomic", "sync.default.two_stage", "async.default.none",
        "async.default.atomic", "async.cshuffle.none", "async.cshuffle.atomic"}


def test_second_build_compiles_nothing_and_says_so(small_cache):
    args = ["build", "--target", "gfx1250", "--geometries", str(small_cache["geometries"]),
            "--dtype", "fp16", "--dtype", "bf16", "--cache-dir", str(small_cache["cache"])]
    r = CliRunner().invoke(main, [*args, "--json"])
    assert r.exit_code == 0
    assert json.loads(r.output) | {"seconds": 0} == {
        "target": "gfx1250", "jobs": 18, "built": 0, "relinked": 0, "up_to_date": 18,
        "rejected": 0, "failed": 0, "stage2_failed": 0, "bytes": 0, "seconds": 0}
    r = CliRunner().invoke(main, args)
    assert "gfx1250: nothing to compile: all 18 jobs up to date" in r.output


def test_progress_counts_jobs_and_weighs_them_by_expected_work(small_cache, tmp_path):
    """Up-to-date jobs settle at once with no work; compiled jobs carry their job_cost, and
    the work reported adds up to the total announced after the plan."""
    cache_dir = tmp_path / "cache"
    shutil.copytree(small_cache["cache"], cache_dir)
    cache = TargetCache(cache_dir, "gfx1250")
    specs = [KernelSpec.from_dict(e.identity) for _, e in cache.iter_entries()]
    stale = sorted(specs, key=lambda s: s.label())[:2]
    for s in stale:
        cache.remove_entry(s.identity_key())
    totals, steps = [], []
    summary = build(BuildRequest(target="gfx1250", jobs=1, cache_dir=str(cache_dir)),
                    progress=lambda n, work: steps.append((n, work)),
                    on_total=lambda n, work: totals.append((n, work)), specs=specs)
    assert (summary.up_to_date, summary.built + summary.relinked) == (16, 2)
    assert totals == [(18, pytest.approx(sum(job_cost(s) for s in stale)))]
    assert steps[0] == (16, 0.0)
    assert sorted(w for _, w in steps[1:]) == sorted(job_cost(s) for s in stale)
    assert sum(n for n, _ in steps) == 18


def _spec(**kw) -> KernelSpec:
    base = dict(target="gfx1250", dtype="fp16", dw_dtype="fp16", tile_m=32, tile_n=32,
                tile_k=32, warp_m=1, warp_n=1, vec_a=8, vec_b=8)
    return KernelSpec(**{**base, **kw})


def test_changing_one_geometry_rebuilds_exactly_its_jobs(tmp_path):
    req = BuildRequest(target="gfx1250", cache_dir=str(tmp_path), jobs=2)
    a, b = _spec(), _spec(tile_n=64, warp_n=2)
    first = build(req, specs=[a, b])
    assert (first.built, first.up_to_date) == (2, 0)
    b2 = _spec(tile_n=64, warp_n=2, tile_k=64)  # one geometry changed
    second = build(req, specs=[a, b2])
    assert (second.built, second.relinked, second.up_to_date) == (1, 0, 1)


@pytest.mark.parametrize("jobs", [2, 1])
def test_llvm_exit_is_a_recorded_failure_and_the_rest_is_published(tmp_path, jobs):
    """Also with one worker: joblib would run n_jobs=1 in this process, where LLVM's exit
    would end the test itself."""
    good = _spec(target="gfx1201")
    # LDS (128+128) x (128+8) x 2 B = 69632 > gfx1201's 65536 (one stage, two do not fit)
    bad = _spec(target="gfx1201", tile_m=128, tile_n=128, tile_k=128, warp_m=2, warp_n=4)
    req = BuildRequest(target="gfx1201", cache_dir=str(tmp_path), jobs=jobs, job_timeout=120)
    s = build(req, specs=[good, bad], validate_specs=False)
    assert (s.built, s.failed) == (1, 1)
    assert s.failures[0].label == bad.label()
    assert "local memory (69632) exceeds limit (65536)" in s.failures[0].reason
    cache = TargetCache(tmp_path, "gfx1201")
    assert _whole(cache) == 1 and cache.read_entry(good.identity_key())
    # not retried on the next run (same toolchain and generator) unless asked
    again = build(req, specs=[good, bad], validate_specs=False)
    assert (again.up_to_date, again.failed, again.built) == (1, 1, 0)
    assert again.failures[0].previous is True


def _build_cmd(cache_dir, geo, *extra):
    return [sys.executable, "-m", "wgradcache", "build", "--target", "gfx1250",
            "--geometries", str(geo), "--cache-dir", str(cache_dir), "--json", *extra]


def test_sigkill_mid_build_leaves_only_whole_entries(tmp_path):
    geo = small_geometries(tmp_path)
    cache_dir = tmp_path / "cache"
    proc = subprocess.Popen(_build_cmd(cache_dir, geo, "--dtype", "fp16", "--jobs", "2"),
                            start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    cache = TargetCache(cache_dir, "gfx1250")
    deadline = time.monotonic() + 300
    while len(cache.entry_keys()) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    present = _whole(cache)
    assert 2 <= present < 9
    r = subprocess.run(_build_cmd(cache_dir, geo, "--dtype", "fp16"), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["up_to_date"] == present
    assert s["built"] + s["relinked"] == 9 - present
    assert _whole(cache) == 9


def test_two_overlapping_builds_at_once_leave_a_consistent_cache(tmp_path):
    geo = small_geometries(tmp_path)
    cache_dir = tmp_path / "cache"
    a = subprocess.Popen(_build_cmd(cache_dir, geo, "--dtype", "fp16", "--jobs", "1"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    b = subprocess.Popen(_build_cmd(cache_dir, geo, "--dtype", "fp16", "--variant",
                                    "sync.default.none", "--variant", "async.default.none",
                                    "--jobs", "1"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out_a, err_a = a.communicate(timeout=900)
    out_b, err_b = b.communicate(timeout=900)
    assert a.returncode == 0 and b.returncode == 0, (err_a, err_b)
    cache = TargetCache(cache_dir, "gfx1250")
    assert _whole(cache) == 9
    ids = {s.identity_key() for s in walk("gfx1250", ["fp16"], None, load(geo))}
    assert set(cache.entry_keys()) == ids


@dataclasses.dataclass(frozen=True)
class _Task:
    """A stand-in for a build job in a worker: returns, hangs, or dies like LLVM's exit."""

    behaviour: str
    key: str

    def work(self) -> dict:
        if self.behaviour == "hang":
            time.sleep(120)
        if self.behaviour == "die":
            os._exit(1)
        return {"key": self.key, "pid": os.getpid()}

    def alone(self, timeout: float) -> dict:
        return {"key": self.key, "retried": True}

    def not_run(self) -> dict:
        return {"key": self.key, "stopped": True}


def test_one_worker_survives_a_hung_and_a_dying_job():
    """--jobs 1: each job runs in a worker process with its own timeout; a hung job is
    killed, a dying worker replaced, and both are retried alone while the rest go on."""
    from wgradcache.pipeline.workers import RunOptions, run_one_worker

    tasks = [_Task(*t) for t in (("ok", "a"), ("hang", "b"), ("ok", "c"), ("die", "d"),
                                 ("ok", "e"))]
    got: list[dict] = []
    t0 = time.monotonic()
    run_one_worker(tasks, RunOptions(n_jobs=1, job_timeout=8), got.append)
    assert time.monotonic() - t0 < 60
    assert [r["key"] for r in got] == ["a", "b", "c", "d", "e"]
    assert [r.get("retried", False) for r in got] == [False, True, False, True, False]
    assert os.getpid() not in {r.get("pid") for r in got}  # never in this process
    assert got[0]["pid"] != got[2]["pid"] != got[4]["pid"]  # replaced after each failure


def test_worker_with_another_toolchain_refuses_to_compile():
    """A worker whose LLVM or LLD differs from the coordinator's (a remote dask worker)
    would file its bytes under the coordinator's content key: the job fails instead, and
    the reason names what differs."""
    from wgradcache.pipeline.build import codegen_context
    from wgradcache.pipeline.workers import CompileJob, job_task

    spec = next(walk("gfx1250", ["fp16"], ["sync.default.none"]))
    options, toolchain, _ = codegen_context()
    elsewhere = {**toolchain, "linker_path": "/opt/elsewhere/ld.lld"}
    ok = job_task(CompileJob(spec, options, elsewhere))
    assert not ok.error and ok.blob  # where the linker lives does not matter
    other = {**toolchain, "linker_version": "LLD 23.0.0"}
    res = job_task(CompileJob(spec, options, other))
    assert res.error.startswith("this worker's toolchain differs from the coordinator's "
                                "in linker_version (")
    assert "'LLD 23.0.0' there" in res.error and res.blob is None
    assert res.transient is True  # a misconfigured worker, not the job: retried next run


def test_either_linker_serves_the_same_cache(tmp_path, monkeypatch):
    """Built with ld.lld processes, the cache is up to date for the in-process LLD, and an
    entry lost since is relinked to the existing blob, not compiled again."""
    specs = list(walk("gfx1250", ["fp16"], ["sync.cshuffle.atomic"]))[:2]
    req = BuildRequest(target="gfx1250", jobs=1, cache_dir=str(tmp_path))
    monkeypatch.setenv("WGRADCACHE_LINKER", "subprocess")
    first = build(req, specs=specs)
    assert (first.built, first.failed) == (2, 0)
    monkeypatch.setenv("WGRADCACHE_LINKER", "inprocess")
    assert build(req, specs=specs).up_to_date == 2
    cache = TargetCache(str(tmp_path), "gfx1250")
    for ik, _ in list(cache.iter_entries()):
        (cache.entries / f"{ik}.json").unlink()
    again = build(req, specs=specs)
    assert (again.relinked, again.built, again.failed) == (2, 0, 0)
    assert _whole(cache) == 2


def test_stats_record_where_the_workers_time_went(tmp_path):
    """Each run's stats line sums the workers' seconds by phase over what it compiled; a
    no-op run compiled nothing and records none."""
    specs = list(walk("gfx1250", ["bf16"], ["sync.default.none"]))[:2]
    req = BuildRequest(target="gfx1250", jobs=1, cache_dir=str(tmp_path))
    build(req, specs=specs)
    build(req, specs=specs)
    first, second = TargetCache(str(tmp_path), "gfx1250").stats()
    phases = first["phases"]
    assert set(phases) == {"emit", "parse", "codegen", "link", "listing", "read", "isa_stats"}
    assert all(v > 0 for v in phases.values())
    assert phases["codegen"] > phases["link"] and sum(phases.values()) <= first["seconds"]
    assert (second["up_to_date"], second["phases"]) == (2, {})
