"""The stage-2 reduce kernels a build's two-stage jobs need, compiled beside the main pass.

Keyed by (dW dtype, R) only, so a handful per target; they are companions of the two-stage
entries (``Stage2Entry``), not walk jobs, and do not count as jobs: a failure is counted in
``BuildSummary.stage2_failed``. Those up to date are skipped without emitting, those with
the same IR relinked, the rest start compiling in isolated children before the main pass
(``start``), so their start-up and codegen overlap it. Each is published as soon as its
child is done (``poll``, between the main pass's results), and the two-stage entries held
for it follow; what is left is collected after the main pass (``finish``). A kernel that
fails fails the two-stage jobs that need it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from wgradcache.cache.entry import CorruptEntry, Stage2Entry
from wgradcache.cache.store import TargetCache, content_key, stage2_name
from wgradcache.model.spec import KernelSpec
from wgradcache.pipeline.plan import BuildContext, JobFailure
from wgradcache.pipeline.publish import Publisher, stops_the_build
from wgradcache.pipeline.workers import metadata

__all__ = ["Stage2Builds"]


@dataclass(frozen=True)
class _Started:
    name: str
    dw_dtype: str
    replicas: int
    symbol: str
    block_size: int
    ckey: str
    job: object  # IsolatedCompile


class Stage2Builds:
    """The companions of one build: ``start`` them, ``poll`` between results, then
    ``finish`` or ``cancel``. Each companion compiling is held open in the publisher, so
    its two-stage entries are published only once its record is (``Publisher.hold``)."""

    def __init__(self, cache: TargetCache, ctx: BuildContext, timeout: float,
                 publisher: Publisher):
        self.cache, self.ctx, self.timeout = cache, ctx, timeout
        self.publisher = publisher
        self.started: list[_Started] = []  # compiling, not yet collected

    def start(self, specs: list[KernelSpec]) -> None:
        needed = sorted({(s.dw_dtype, s.ws_replicas) for s in specs
                         if s.reduction == "two_stage"})
        if not needed:
            return
        have_all = self.cache.stage2_entries()
        for dw, r in needed:
            name = stage2_name(dw, r)
            have = have_all.get(name)
            if isinstance(have, CorruptEntry):
                have = None
            if (have is not None and have.generator_digest == self.ctx.generator_digest
                    and have.toolchain_digest == self.ctx.toolchain_digest
                    and self._proven(have)):
                continue  # up to date without emitting, as the entries are
            if self.publisher.summary.stopped:
                self._stopped(name)
                continue
            try:
                self._start_one(name, dw, r, have)
            except Exception as e:  # a generator bug or a publish error: this kernel's
                if stops_the_build(e):  # a relink the cache refused
                    self.publisher.halt(e)
                    self._stopped(name)
                else:
                    self._fail(name, f"{type(e).__name__}: {e}")

    def _proven(self, have: Stage2Entry) -> bool:
        """Its blob is the size and sha256 it records (``check_blob``, as for the entries'
        blobs): a truncated or flipped stage-2 blob is compiled again, not kept."""
        return self.cache.check_blob(have.blob, have.blob_size, have.blob_sha256)[0]

    def _start_one(self, name: str, dw: str, r: int, have: Stage2Entry | None) -> None:
        from wgradcache.compile.codegen import CodegenOptions
        from wgradcache.compile.isolate import IsolatedCompile
        from wgradcache.kernel.lower import lower
        from wgradcache.wgrad.stage2 import build_stage2

        target, ctx = self.cache.target, self.ctx
        kd = build_stage2(target, dw, r)
        ir = lower(kd, target)
        ckey = content_key(ir, kd.name, target, ctx.options, ctx.toolchain)
        if have is not None and have.blob == ckey and self._proven(have):
            with self.cache.lock():  # same IR: relink to the new generator / toolchain
                self.cache.write_stage2(replace(have, generator_digest=ctx.generator_digest,
                                                toolchain_digest=ctx.toolchain_digest))
            return
        self.publisher.hold(name)  # before the child starts: no result can slip past
        job = IsolatedCompile(ir, target, CodegenOptions(), timeout=self.timeout)
        self.started.append(_Started(name, dw, r, kd.name, kd.block_size, ckey, job))

    def poll(self) -> None:
        """Publish the companions whose compile has ended, and so release their entries
        early: a build killed later keeps them. Never raises (it runs between results)."""
        for s in [s for s in self.started if s.job.done()]:
            self.started.remove(s)
            self._collect(s)

    def cancel(self) -> None:
        for s in self.started:
            s.job.cancel()

    def finish(self) -> None:
        """Wait for the companions still compiling; publish them, then their entries."""
        while self.started:
            self._collect(self.started.pop(0))

    def _collect(self, s: _Started) -> None:
        out = s.job.outcome()
        if not out.ok:
            self._fail(s.name, out.error)
            return
        if self.publisher.summary.stopped:  # the cache refused a write: none is tried
            self._stopped(s.name)
            return
        try:
            meta = metadata(out.obj, self.cache.target, None)
            with self.cache.lock():
                ref = self.cache.write_blob(s.ckey, out.obj.hsaco, meta)
                self.cache.write_stage2(Stage2Entry(
                    name=s.name, dw_dtype=s.dw_dtype, ws_replicas=s.replicas,
                    symbol=s.symbol, blob=s.ckey, blob_size=ref.size,
                    blob_sha256=ref.sha256, block_size=s.block_size,
                    code_object=meta.code_object, isa=meta.isa,
                    generator_digest=self.ctx.generator_digest,
                    toolchain_digest=self.ctx.toolchain_digest))
                self.cache.stamp_used(s.ckey)
        except Exception as e:  # a full disk, or a code object metadata cannot read
            if stops_the_build(e):  # its held jobs are then counted as stopped too
                self.publisher.halt(e)
                self._stopped(s.name)
                return
            self._fail(s.name, f"publish: {type(e).__name__}: {e}")
            return
        self.publisher.summary.bytes += ref.size
        self.publisher.release(s.name)

    def _stopped(self, name: str) -> None:
        summary = self.publisher.summary
        summary.stage2_failed += 1
        summary.stopped_stage2 += 1
        self.publisher.release(name)  # its held jobs: stopped, each counted once

    def _fail(self, name: str, reason: str) -> None:
        summary = self.publisher.summary
        summary.stage2_failed += 1
        summary.failures.append(JobFailure(f"stage2 {name}", reason))
        self.publisher.refuse(name, reason)
