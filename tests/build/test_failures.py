"""Failures of a build: every job ends in exactly one count, publish errors are failures
with reasons, transient failures are compiled again by the next build, and the relink
decision is the coordinator's."""

from __future__ import annotations

import json

import pytest

from wgradcache.cache.entry import record_line
from wgradcache.cache.store import TargetCache
from wgradcache.jobs import walk
from wgradcache.model.spec import KernelSpec
from wgradcache.pipeline import build as build_mod
from wgradcache.pipeline.build import BuildRequest, BuildSummary, build, codegen_context
from wgradcache.pipeline.plan import JobFailure
from wgradcache.pipeline.workers import CompileJob


def _adds_up(s: BuildSummary) -> bool:
    return s.jobs == s.built + s.relinked + s.up_to_date + s.rejected + s.failed


def _specs(n: int) -> list[KernelSpec]:
    return list(walk("gfx1250", ["fp16"], ["sync.default.none"]))[:n]


@pytest.mark.parametrize("jobs", [2, 1])
def test_a_publish_error_is_a_failure_with_its_reason_and_the_rest_is_published(
        tmp_path, monkeypatch, jobs):
    """An OSError while publishing one job (a stale NFS handle; a full or read-only disk
    stops the whole build instead: tests/hostile) fails that job, transiently, and nothing
    else: before, the job was counted neither built nor failed and the rest of its chunk
    was compiled again one by one."""
    specs = _specs(4)
    real = TargetCache.write_entry
    calls = []

    def flaky(self, *args, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(116, "Stale file handle")
        return real(self, *args, **kw)

    alone = []
    monkeypatch.setattr(TargetCache, "write_entry", flaky)
    monkeypatch.setattr(CompileJob, "alone", lambda job, timeout: alone.append(job))
    req = BuildRequest(target="gfx1250", cache_dir=str(tmp_path), jobs=jobs)
    s = build(req, specs=specs)
    assert (s.jobs, s.built, s.failed, alone) == (4, 3, 1, [])
    assert _adds_up(s)
    assert s.failures == [JobFailure(s.failures[0].label,
                                     "publish: OSError: [Errno 116] Stale file handle",
                                     transient=True)]
    monkeypatch.setattr(TargetCache, "write_entry", real)
    again = build(req, specs=specs)  # transient: not "failed before"; its blob was written
    assert (again.up_to_date, again.relinked, again.built, again.failed) == (3, 1, 0, 0)


def test_a_worker_with_another_toolchain_fails_transiently_and_is_retried(tmp_path,
                                                                          monkeypatch):
    """A misconfigured worker (another LLVM than the coordinator's) refuses its jobs; the
    next build with a sound worker compiles them instead of skipping them as failed
    before."""
    specs = _specs(2)
    options, toolchain, tdigest = codegen_context()
    monkeypatch.setattr(build_mod, "codegen_context", lambda target=None: (
        options, {**toolchain, "llvm_version": "LLVM 21.1.0"}, tdigest))
    req = BuildRequest(target="gfx1250", cache_dir=str(tmp_path), jobs=2)
    first = build(req, specs=specs)
    assert (first.failed, first.built) == (2, 0) and _adds_up(first)
    assert all(f.transient and "differs from the coordinator's in llvm_version"
               in f.reason for f in first.failures)
    monkeypatch.undo()
    second = build(req, specs=specs)
    assert (second.built, second.failed, second.failures) == (2, 0, [])


def test_a_timeout_is_transient():
    from wgradcache.pipeline.workers import CompileJob, job_alone

    options, toolchain, _ = codegen_context()
    res = job_alone(CompileJob(_specs(1)[0], options, toolchain), timeout=0.01)
    assert res.error.startswith("codegen timed out after 0.01 s")
    assert res.transient is True


def test_a_blob_removed_while_relinking_is_transient(tmp_path, monkeypatch):
    specs = _specs(2)
    req = BuildRequest(target="gfx1250", cache_dir=str(tmp_path), jobs=1)
    assert build(req, specs=specs).built == 2
    cache = TargetCache(tmp_path, "gfx1250")
    for ik in cache.entry_keys():
        cache.remove_entry(ik)
    # a concurrent gc removed the sidecars after the plan listed the blobs as relinkable
    monkeypatch.setattr(TargetCache, "read_sidecar", lambda self, key, facts=None: None)
    lost = build(req, specs=specs)
    assert (lost.failed, lost.relinked, lost.built) == (2, 0, 0) and _adds_up(lost)
    assert {f.reason for f in lost.failures} == {
        "blob or its sidecar gone while relinking (a concurrent gc?); the next build "
        "compiles it"}
    monkeypatch.undo()
    again = build(req, specs=specs)  # the sidecars were dropped: compiled, not relinked
    assert (again.built, again.relinked, again.failed) == (2, 0, 0)


def test_a_sidecar_that_is_not_whole_is_compiled_again_not_relinked_forever(tmp_path):
    specs = _specs(1)
    req = BuildRequest(target="gfx1250", cache_dir=str(tmp_path), jobs=1)
    assert build(req, specs=specs).built == 1
    cache = TargetCache(tmp_path, "gfx1250")
    (ik,) = cache.entry_keys()
    key = cache.read_entry(ik).blob
    cache.remove_entry(ik)
    cache.sidecar_path(key).write_text("{")
    first = build(req, specs=specs)
    assert (first.failed, first.failures[0].transient) == (1, True)
    second = build(req, specs=specs)
    assert (second.built, second.failed) == (1, 0)
    assert cache.read_sidecar(key) is not None


def test_the_relink_decision_is_the_coordinators(tmp_path, monkeypatch):
    """A worker relinks exactly the content keys it is handed and reads no cache: a Dask
    worker's own ./cache decides nothing."""
    from wgradcache.pipeline.workers import CompileJob, job_task

    spec = _specs(1)[0]
    options, toolchain, _ = codegen_context()
    monkeypatch.chdir(tmp_path)  # an empty ./cache here
    compiled = job_task(CompileJob(spec, options, toolchain))
    assert compiled.blob and compiled.relink is False
    relink = job_task(CompileJob(spec, options, toolchain, relinkable=frozenset({compiled.ckey})))
    assert relink.relink is True and relink.blob is None
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_rejects_are_recorded_once_per_identity_and_reported_for_this_run(tmp_path):
    """Every build refuses the same specs: rejects.jsonl keeps one line per identity
    instead of one per build, and the summary lists this run's rejects."""
    good = _specs(1)[0]
    bad = KernelSpec.from_dict({**good.canonical(), "dw_dtype": "bf16"})  # fp16 A/B
    req = BuildRequest(target="gfx1250", cache_dir=str(tmp_path), jobs=1)
    for _ in range(3):
        s = build(req, specs=[good, bad])
        assert (s.rejected, s.built + s.up_to_date, s.failed) == (1, 1, 0) and _adds_up(s)
    cache = TargetCache(tmp_path, "gfx1250")
    lines = cache.rejects_path.read_text().splitlines()
    assert [json.loads(x)["identity_key"] for x in lines] == [bad.identity_key()]
    assert [record_line(r) for r in s.rejects] == [lines[0].encode() + b"\n"]
    assert s.rejects[0].reason == "dW dtype 'bf16' must be fp16 or fp32"
    assert build(req, specs=[good]).rejects == []
