"""Publishing: the coordinator turns worker results into cache entries and failures.

Blob, then its metadata sidecar, then the entry (the commit marker), each by temp file +
``os.replace`` under the target's writer lock, in one lock hold so gc never sees the blob
without its entry. Only this process writes; workers stay pure.

A two-stage entry is useless without its stage-2 reduce kernel, which compiles beside the
main pass (``stage2.py``): while that kernel's record is not published, the results of its
two-stage jobs are held here (``hold``) and published after it (``release``), so a build
killed at any moment never leaves a two-stage entry without its stage-2 record (before, 5 of
14 SIGKILLs did, and ``select`` served them). A stage-2 kernel that fails fails its held jobs
with its reason (``refuse``), transiently: the next build compiles that kernel again.

Every job ends in exactly one count of the summary: a publish that fails (a blob a
concurrent gc removed) is a failure with its reason, transient, so the next build tries
again, and the build goes on. A write the cache refuses as a whole (``STOPPING``: a
read-only or full file system, no permission, a layout refused) stops publishing at the
first one: nothing more is written (not even failure records), the jobs still to come are
not compiled, and each one it stopped counts as failed (``BuildSummary.stopped_jobs``,
transient: no record, so the next build compiles them); the run reports that error once
(``stopped``), not one line per job. So ``jobs == built + relinked + up_to_date +
rejected + failed`` always holds.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from wgradcache.cache.entry import BlobMeta, Entry, FailureRecord, RejectRecord
from wgradcache.cache.store import BlobRef, TargetCache, stage2_name
from wgradcache.model.spec import KernelSpec
from wgradcache.pipeline.plan import BuildContext, JobFailure, job_cost
from wgradcache.pipeline.workers import JobResult
from wgradcache.wgrad.abi import record_facts

__all__ = ["BuildSummary", "BuildContext", "FailureGroup", "Publisher", "STOPPING",
           "group_failures", "stops_the_build"]

# errnos of a write the cache refuses whatever is written: every later publish would fail
STOPPING = frozenset({errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM,
                      errno.ENOTDIR, errno.EIO})


def stops_the_build(e: BaseException) -> bool:
    """Whether a publish error means the cache cannot be written at all (``STOPPING``)."""
    return isinstance(e, OSError) and e.errno in STOPPING


@dataclass(frozen=True)
class FailureGroup:
    """The jobs of one build that failed for the same reason: what the end-of-build
    summary prints once, however many jobs it holds (a machine-wide cause, say a ptxas that
    rejects every kernel, is one line, not one per job)."""

    reason: str
    previous: bool  # failed in an earlier build; not compiled again without --retry-failed
    labels: tuple[str, ...]

    SHOWN = 3  # labels named in the line; the rest are counted

    def line(self) -> str:
        again = " (failed before; --retry-failed compiles it again)" if self.previous else ""
        if len(self.labels) == 1:
            return f"FAILED {self.labels[0]}: {self.reason}{again}"
        named = ", ".join(self.labels[:self.SHOWN])
        rest = len(self.labels) - self.SHOWN
        more = f" and {rest} more" if rest > 0 else ""
        return f"FAILED {len(self.labels)} jobs: {self.reason}{again}: {named}{more}"


def group_failures(failures: list[JobFailure]) -> list[FailureGroup]:
    """``failures`` (``BuildSummary.failures``) by (reason, previous): most jobs first, then
    by reason, labels sorted, so the same failures read the same whatever order parallel
    workers finished in."""
    groups: dict[tuple[str, bool], list[str]] = {}
    for f in failures:
        groups.setdefault((f.reason, f.previous), []).append(f.label)
    return [FailureGroup(reason, previous, tuple(sorted(labels)))
            for (reason, previous), labels in sorted(groups.items(),
                                                     key=lambda kv: (-len(kv[1]), kv[0]))]


@dataclass
class BuildSummary:
    target: str
    jobs: int = 0
    built: int = 0
    relinked: int = 0
    up_to_date: int = 0
    rejected: int = 0
    failed: int = 0  # jobs; stage-2 companions are not jobs and count in stage2_failed
    stage2_failed: int = 0
    bytes: int = 0
    seconds: float = 0.0
    failures: list[JobFailure] = field(default_factory=list)  # jobs' and stage-2 kernels'
    rejects: list[RejectRecord] = field(default_factory=list)  # this run's, one per identity
    # worker seconds summed over the jobs compiled here, by phase (emit, parse, codegen, link,
    # listing, read, isa_stats): recorded in stats.jsonl, where the time of a build went
    phases: dict[str, float] = field(default_factory=dict)
    # the first write the cache refused (``STOPPING``), and how many jobs and stage-2
    # kernels went unpublished because of it (counted in failed / stage2_failed too)
    stopped: str = ""
    stopped_jobs: int = 0
    stopped_stage2: int = 0

    def stopped_line(self) -> str:
        """The run's one line for a stop, or "" when it did not stop."""
        if not self.stopped:
            return ""
        s2 = (f" and {self.stopped_stage2} stage-2 kernel(s)" if self.stopped_stage2
              else "")
        return (f"{self.target}: the cache cannot be written ({self.stopped}): "
                f"{self.stopped_jobs} job(s){s2} not published, nothing half-written; "
                "the next build compiles them")

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.stage2_failed == 0

    def to_json(self) -> dict:
        doc = {"target": self.target, "jobs": self.jobs, "built": self.built,
               "relinked": self.relinked, "up_to_date": self.up_to_date,
               "rejected": self.rejected, "failed": self.failed,
               "stage2_failed": self.stage2_failed, "bytes": self.bytes,
               "seconds": round(self.seconds, 3)}
        if self.stopped:
            doc.update(stopped=self.stopped, stopped_jobs=self.stopped_jobs,
                       stopped_stage2=self.stopped_stage2)
        return doc


@dataclass(frozen=True)
class PublishHooks:
    """What the publisher calls back into the build: ``progress`` (jobs, compile work) once
    per result taken, and ``recompile``, a job compiled again here in an isolated child
    when a relink's blob is not proven (None: that job fails, transiently)."""

    progress: Callable[[int, float], None]
    recompile: Callable[[KernelSpec], JobResult] | None = None


class Publisher:
    """Takes each worker result once, in the coordinator, and counts it once."""

    def __init__(self, cache: TargetCache, ctx: BuildContext, summary: BuildSummary,
                 specs: list[KernelSpec], hooks: PublishHooks):
        self.cache, self.ctx, self.summary = cache, ctx, summary
        self.recompile = hooks.recompile
        self.progress = hooks.progress
        self._specs = {s.identity_key(): s for s in specs}
        # stage-2 name -> the results held for it
        self._held: dict[str, list[tuple[KernelSpec, JobResult]]] = {}
        self._refused: dict[str, str] = {}  # stage-2 name -> why its jobs fail
        self._written: set[str] = set()  # content keys whose blob this run wrote

    def take(self, res: JobResult) -> None:
        """One worker result: publish it, hold it for its stage-2 kernel, or record its
        failure. Never raises for an error of the cache (``run_chunked`` would take it for
        a dead worker). Progress counts it now: its compile work is done."""
        spec = self._specs[res.key]
        for phase, sec in res.t.items():
            self.summary.phases[phase] = self.summary.phases.get(phase, 0.0) + sec
        name = stage2_name(spec.dw_dtype, spec.ws_replicas)
        if self.summary.stopped and not (res.error and not res.stopped):
            self._stopped_job()
        elif res.error:
            self.fail(spec, res.error, transient=res.transient)
        elif spec.reduction == "two_stage" and name in self._refused:
            self.fail(spec, self._refused[name], transient=True)
        elif spec.reduction == "two_stage" and name in self._held:
            self._held[name].append((spec, res))
        else:
            self._publish_or_fail(spec, res)
        self.progress(1, job_cost(spec))

    def hold(self, name: str) -> None:
        """Hold the two-stage results of stage-2 kernel ``name`` until it is published."""
        self._held.setdefault(name, [])

    def release(self, name: str) -> None:
        """Stage-2 kernel ``name`` is published: so are the results held for it."""
        for spec, res in self._held.pop(name, []):
            self._publish_or_fail(spec, res)

    def refuse(self, name: str, reason: str) -> None:
        """Stage-2 kernel ``name`` failed: its jobs, held and still to come, fail with the
        reason, transiently (their own compile was fine)."""
        why = f"its stage-2 kernel {name} failed: {reason}"
        self._refused[name] = why
        for spec, _ in self._held.pop(name, []):
            self.fail(spec, why, transient=True)

    def halt(self, e: OSError) -> None:
        """The cache refused a write (``stops_the_build``): publish nothing more."""
        if not self.summary.stopped:
            self.summary.stopped = f"{type(e).__name__}: {e}"

    def _stopped_job(self) -> None:
        self.summary.failed += 1
        self.summary.stopped_jobs += 1

    def _publish_or_fail(self, spec: KernelSpec, res: JobResult) -> None:
        if self.summary.stopped:
            self._stopped_job()
            return
        try:
            self._publish(spec, res)
        except OSError as e:
            if stops_the_build(e):
                self.halt(e)
                self._stopped_job()
                return
            self.fail(spec, f"publish: {type(e).__name__}: {e}", transient=True)

    def _compile_instead(self, spec: KernelSpec, res: JobResult) -> None:
        """A relink whose blob its sidecar does not prove: compile the job here (an isolated
        child, ``recompile``) and publish that, or fail it, transiently, without one."""
        if self.recompile is None:
            self.fail(spec, f"blob {res.ckey[:16]} is not the bytes its sidecar records; "
                            "the next build compiles it", transient=True)
            return
        again = self.recompile(spec)
        if again.error:
            self.fail(spec, again.error, transient=again.transient)
        elif again.blob is None:  # relinkable again: the sidecar was just removed
            self.fail(spec, f"blob {res.ckey[:16]} is not the bytes its sidecar records; "
                            "the next build compiles it", transient=True)
        else:
            self._publish_or_fail(spec, again)

    def fail(self, spec: KernelSpec, reason: str, *, transient: bool) -> None:
        """Count and record a failed job; transient ones are compiled by the next build."""
        ik = spec.identity_key()
        self.summary.failed += 1
        record = FailureRecord(identity_key=ik, label=spec.label(), reason=reason,
                               generator_digest=self.ctx.generator_digest,
                               toolchain_digest=self.ctx.toolchain_digest, when=time.time(),
                               transient=transient)
        if self.summary.stopped:  # nothing more is written
            reason = f"{reason} (failure record not written: the cache cannot be written)"
        else:
            try:
                with self.cache.lock():
                    self.cache.write_failure(record)
            except OSError as e:  # still a failure of this run, only not remembered
                reason = f"{reason} (failure record not written: {e})"
        self.summary.failures.append(JobFailure(spec.label(), reason, transient=transient))

    def _publish(self, spec: KernelSpec, res: JobResult) -> None:
        """Blob (when compiled here), sidecar, then the entry. A relink whose blob or
        sidecar vanished since the plan listed it (a concurrent gc), or whose sidecar is
        not whole, is a transient failure, and the sidecar is dropped so the next build
        compiles the job instead of trying that relink again. A relink whose blob is not
        the size and sha256 its sidecar records is compiled here instead
        (``_compile_instead``) after dropping that sidecar."""
        ik, ckey = res.key, res.ckey
        cache = self.cache
        unproven = False
        with cache.lock():
            if res.blob is not None and ckey in self._written:
                # Another job of this run compiled the same IR (kernels that differ only
                # in name, e.g. the stage 1 of fp16 and fp16_f32 two-stage): its blob is
                # this one's, and overwriting it would change the bytes that job's entry
                # records (the symbol is in the object). Relink to it.
                res = replace(res, blob=None, meta=None)
            if res.blob is not None:
                meta = res.meta
                assert meta is not None  # a compiled result carries its sidecar
                ref = cache.write_blob(ckey, res.blob, meta)
                self._written.add(ckey)
            else:
                meta = cache.read_sidecar(ckey, record_facts(spec))
                if meta is None:
                    cache.forget_sidecar(ckey)
                    self.fail(spec, "blob or its sidecar gone while relinking (a concurrent "
                                    "gc?); the next build compiles it", transient=True)
                    return
                if not cache.check_blob(ckey, meta.blob_size, meta.blob_sha256)[0]:
                    # an orphan nothing vouches for whose bytes are not its sidecar's, or a
                    # sidecar from before sha256: never relinked; compiled here instead
                    cache.forget_sidecar(ckey)
                    unproven = True
                else:
                    ref = BlobRef(ckey, meta.blob_size, meta.blob_sha256)  # proven just now
            if not unproven:
                cache.write_entry(self._entry(spec, ik, ref, res, meta))
                cache.clear_failure(ik)
                cache.stamp_used(ckey)
        if unproven:
            self._compile_instead(spec, res)
            return
        if res.blob is not None:
            self.summary.built += 1
            self.summary.bytes += ref.size
        else:
            self.summary.relinked += 1

    def _entry(self, spec: KernelSpec, ik: str, ref: BlobRef, res: JobResult,
               meta: BlobMeta) -> Entry:
        ctx, co = self.ctx, meta.code_object
        return Entry(
            identity_key=ik, identity=spec.canonical(), label=spec.label(),
            target=spec.target, variant=spec.variant, dtype=spec.dtype_key,
            blob=ref.key, blob_size=ref.size, blob_sha256=ref.sha256,
            symbol=co.get("symbol", res.symbol), emitted_symbol=res.symbol,
            ir_sha256=res.ir_sha256, block_size=spec.block_size, code_object=co,
            isa=meta.isa, generator_digest=ctx.generator_digest, toolchain=ctx.toolchain,
            toolchain_digest=ctx.toolchain_digest, codegen_options=ctx.options,
            published=time.time())
