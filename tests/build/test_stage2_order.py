"""A two-stage entry is published only after its stage-2 kernel's record, whether that
kernel's compile ends during the main pass or after it; when the kernel fails, its
two-stage jobs are failures with its reason and no entry of theirs is written."""

from __future__ import annotations

import pytest

from wgradcache.cache.entry import Entry
from wgradcache.cache.store import TargetCache
from wgradcache.compile import isolate
from wgradcache.compile.isolate import CompileOutcome
from wgradcache.jobs import walk
from wgradcache.pipeline.build import BuildRequest, BuildSummary, build

_GEOMETRY = (32, 32, 32, 1, 1)


def _specs():
    """Two two-stage jobs and one atomic job of one small geometry."""
    two = [s for s in walk("gfx1250", ["fp16"], ["sync.default.two_stage"])
           if s.geometry == _GEOMETRY][:2]
    atomic = [s for s in walk("gfx1250", ["fp16"], ["sync.default.atomic"])
              if s.geometry == _GEOMETRY][:1]
    return two + atomic


def _adds_up(s: BuildSummary) -> bool:
    return s.jobs == s.built + s.relinked + s.up_to_date + s.rejected + s.failed


class _Slow(isolate.IsolatedCompile):
    """The real compile, reported as still running until the build collects it."""

    def done(self) -> bool:
        return False


class _Fails(isolate.IsolatedCompile):
    """A stage-2 compile that LLVM refuses."""

    def __init__(self, *a, **kw):
        self.started = True

    def done(self) -> bool:
        return True

    def outcome(self) -> CompileOutcome:
        return CompileOutcome(False, None, "codegen process killed by SIGABRT: LLVM said no")

    def cancel(self) -> None:
        pass


def _record_writes(monkeypatch) -> list[tuple[str, str]]:
    """The order of the cache's entry and stage-2 record writes: (kind, variant or name)."""
    order: list[tuple[str, str]] = []
    entry, stage2 = TargetCache.write_entry, TargetCache.write_stage2

    def write_entry(self, e, *a, **kw):
        order.append(("entry", e.variant))
        return entry(self, e, *a, **kw)

    def write_stage2(self, e, *a, **kw):
        order.append(("stage2", e.name))
        return stage2(self, e, *a, **kw)

    monkeypatch.setattr(TargetCache, "write_entry", write_entry)
    monkeypatch.setattr(TargetCache, "write_stage2", write_stage2)
    return order


@pytest.mark.parametrize("stage2_ends", ["during the main pass", "after it"])
def test_two_stage_entries_follow_their_stage2_record(tmp_path, monkeypatch, stage2_ends):
    """Before, the main pass published two-stage entries while their kernel compiled, and
    a build killed meanwhile left them without it. ``after it``: the kernel's compile is
    still running when the last job is taken, so the entries wait for ``finish``."""
    if stage2_ends == "after it":
        monkeypatch.setattr(isolate, "IsolatedCompile", _Slow)
    order = _record_writes(monkeypatch)
    s = build(BuildRequest(target="gfx1250", cache_dir=str(tmp_path), jobs=1),
              specs=_specs())
    assert (s.built, s.failed, s.stage2_failed) == (3, 0, 0)
    kinds = [k for k, _ in order]
    assert kinds.count("stage2") == 1 and kinds.count("entry") == 3
    two_stage = [i for i, (k, v) in enumerate(order) if k == "entry" and "two_stage" in v]
    assert len(two_stage) == 2 and min(two_stage) > kinds.index("stage2")


def test_a_failed_stage2_kernel_fails_its_two_stage_jobs_and_publishes_none(tmp_path,
                                                                           monkeypatch):
    monkeypatch.setattr(isolate, "IsolatedCompile", _Fails)
    req = BuildRequest(target="gfx1250", cache_dir=str(tmp_path), jobs=1)
    s = build(req, specs=_specs())
    assert (s.built, s.failed, s.stage2_failed) == (1, 2, 1) and _adds_up(s)
    why = "its stage-2 kernel fp16-wsr8 failed: codegen process killed by SIGABRT: LLVM said no"
    jobs = [f for f in s.failures if not f.label.startswith("stage2 ")]
    assert [(f.reason, f.transient) for f in jobs] == [(why, True)] * 2
    cache = TargetCache(tmp_path, "gfx1250")
    assert [e.variant for _, e in cache.iter_entries() if isinstance(e, Entry)] == [
        "sync.default.atomic"]
    assert cache.read_stage2("fp16-wsr8") is None
    # transient: the next build, with a stage-2 kernel that compiles, builds both
    monkeypatch.setattr(isolate, "IsolatedCompile", _Slow)
    again = build(req, specs=_specs())
    assert (again.up_to_date, again.built + again.relinked, again.failed) == (1, 2, 0)
    assert again.stage2_failed == 0 and cache.read_stage2("fp16-wsr8") is not None


def test_a_stage2_publish_error_fails_its_two_stage_jobs(tmp_path, monkeypatch):
    """A write error while writing the stage-2 record (one that does not stop the build,
    as a full disk does): the kernel and its jobs fail with that reason, and no two-stage
    entry names a kernel that is not there."""
    def full(self, *a, **kw):
        raise OSError(116, "Stale file handle")

    monkeypatch.setattr(TargetCache, "write_stage2", full)
    s = build(BuildRequest(target="gfx1250", cache_dir=str(tmp_path), jobs=2),
              specs=_specs())
    assert (s.built, s.failed, s.stage2_failed) == (1, 2, 1) and _adds_up(s)
    reasons = {f.reason for f in s.failures}
    assert "publish: OSError: [Errno 116] Stale file handle" in reasons
    assert ("its stage-2 kernel fp16-wsr8 failed: publish: OSError: [Errno 116] Stale file "
            "handle") in reasons
    cache = TargetCache(tmp_path, "gfx1250")
    assert all("two_stage" not in e.variant for _, e in cache.iter_entries())
