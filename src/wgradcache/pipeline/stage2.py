"""The stage-2 reduce kernels a build's two-stage jobs need, compiled beside the main pass.

Keyed by (dW dtype, R) only, so a handful per target; they are companions of the two-stage
entries (``Stage2Entry``), not walk jobs, and do not count as jobs: a failure is counted in
``BuildSummary.stage2_failed``. Those up to date are skipped without emitting, those with
the same IR relinked, the rest start compiling in isolated children before the main pass
(``start``) and are collected after it (``finish``), so their start-up and codegen overlap
it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from wgradcache.cache.entry import CorruptEntry, Stage2Entry
from wgradcache.cache.store import TargetCache, content_key, stage2_name
from wgradcache.model.spec import KernelSpec
from wgradcache.pipeline.publish import BuildContext, BuildSummary
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
    """The companions of one build: ``start`` them, then ``finish`` or ``cancel``."""

    def __init__(self, cache: TargetCache, ctx: BuildContext, timeout: float):
        self.cache, self.ctx, self.timeout = cache, ctx, timeout
        self.started: list[_Started] = []

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
                    and self.cache.has_blob(have.blob)):
                continue  # up to date without emitting, as the entries are
            self._start_one(name, dw, r, have)

    def _start_one(self, name: str, dw: str, r: int, have: Stage2Entry | None) -> None:
        from wgradcache.compile.codegen import CodegenOptions
        from wgradcache.compile.isolate import IsolatedCompile
        from wgradcache.kernel.lower_llvm import lower
        from wgradcache.wgrad.stage2 import build_stage2

        target, ctx = self.cache.target, self.ctx
        kd = build_stage2(target, dw, r)
        ir = lower(kd, target)
        ckey = content_key(ir, kd.name, target, ctx.options, ctx.toolchain)
        if have is not None and have.blob == ckey and self.cache.has_blob(ckey):
            with self.cache.lock():  # same IR: relink to the new generator / toolchain
                self.cache.write_stage2(replace(have, generator_digest=ctx.generator_digest,
                                                toolchain_digest=ctx.toolchain_digest))
            return
        job = IsolatedCompile(ir, target, CodegenOptions(), timeout=self.timeout)
        self.started.append(_Started(name, dw, r, kd.name, kd.block_size, ckey, job))

    def cancel(self) -> None:
        for s in self.started:
            s.job.cancel()

    def finish(self, summary: BuildSummary) -> None:
        for s in self.started:
            out = s.job.outcome()
            if not out.ok:
                self._fail(summary, s, out.error)
                continue
            try:
                meta = metadata(out.obj)
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
            except OSError as e:
                self._fail(summary, s, f"publish: {type(e).__name__}: {e}")
                continue
            summary.bytes += ref.size

    @staticmethod
    def _fail(summary: BuildSummary, s: _Started, reason: str) -> None:
        summary.stage2_failed += 1
        summary.failures.append({"label": f"stage2 {s.name}", "reason": reason})
