"""Build: walk -> plan -> compile -> publish (DESIGN §7, §8); this module is the driver.

* ``plan``: the jobs (walk, geometry filter, shard, limit) and what needs no compile: an
  entry with this generator digest and toolchain is up to date without emitting anything.
* ``workers``: pure tasks, job -> bytes. The IR is emitted (cheap, in the workers) and
  keyed; a content key the coordinator's cache already has a blob for is relinked without
  codegen; only new content keys are compiled. LLVM exits are survived and retried alone.
* ``publish``: only this process writes: blob, sidecar, then the entry (the commit marker);
  a two-stage entry only after its stage-2 kernel's record.
* ``stage2``: the reduce kernels of two-stage jobs, compiled beside the main pass.

The public names (``build``, ``BuildRequest``, ``BuildSummary``, ``parse_shard``,
``codegen_context``, ``select_jobs``, ``job_cost``) are importable from here.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict

from wgradcache.cache.store import TargetCache
from wgradcache.model.spec import KernelSpec
from wgradcache.pipeline.plan import (
    BuildContext,
    BuildRequest,
    job_cost,
    make_plan,
    parse_shard,
    select_jobs,
)
from wgradcache.pipeline.publish import BuildSummary, Publisher, PublishHooks
from wgradcache.pipeline.stage2 import Stage2Builds
from wgradcache.pipeline.workers import (
    CompileJob,
    JobResult,
    RunOptions,
    codegen_context,
    run_chunked,
)

__all__ = ["BuildRequest", "BuildSummary", "select_jobs", "build", "check_requests",
           "parse_shard", "job_cost", "codegen_context"]


def build(req: BuildRequest, progress: Callable[[int, float], None] | None = None,
          on_total: Callable[[int, float], None] | None = None,
          specs: list[KernelSpec] | None = None, validate_specs: bool = True) -> BuildSummary:
    """Bring the cache up to date for the requested jobs; see the module docstring.

    ``on_total(jobs, work)`` is called once the plan is made (work: the ``job_cost`` sum of
    the jobs left to compile); ``progress(jobs, work)`` as jobs settle.

    ``specs`` replaces the walk (library use); ``validate_specs=False`` compiles specs the
    rules refuse (how the tests plant a job that makes LLVM exit).
    """
    from wgradcache.compile.preflight import require_tools
    from wgradcache.wgrad.emit import generator_digest

    t0 = time.monotonic()
    progress = progress or (lambda n, work: None)
    require_tools([req.target])  # a missing tool: one line, before anything is written
    options, toolchain, tdigest = codegen_context(req.target)
    ctx = BuildContext(generator_digest(), options, toolchain, tdigest)
    cache = TargetCache(req.cache_dir, req.target)
    specs = select_jobs(req) if specs is None else specs

    plan = make_plan(specs, cache, req, ctx, validate_specs)
    summary = BuildSummary(target=req.target, jobs=len(specs), up_to_date=plan.up_to_date,
                           rejected=len(plan.rejected), failed=len(plan.previous),
                           failures=list(plan.previous), rejects=list(plan.rejected.values()))
    if plan.rejected or cache.rejects_path.exists():
        cache.record_rejects(plan.rejected, plan.accepted)  # locks only to write
    # The bar and its ETA follow expected compile work (the jobs run longest first).
    if on_total:
        on_total(len(specs), sum(job_cost(s) for s in plan.pending))
    progress(plan.settled, 0.0)

    hooks = PublishHooks(progress, recompile=lambda s: CompileJob(
        s, options, toolchain, validate_specs).alone(req.job_timeout))
    publisher = Publisher(cache, ctx, summary, plan.pending, hooks)
    stage2 = Stage2Builds(cache, ctx, req.job_timeout, publisher)
    stage2.start(specs)  # two-stage results wait in the publisher for their kernel
    relinkable = cache.relinkable() - plan.untrusted if plan.pending else frozenset()
    tasks = [CompileJob(s, options, toolchain, validate_specs, relinkable)
             for s in plan.pending]

    def take(res: JobResult) -> None:
        publisher.take(res)
        stage2.poll()

    try:
        opts = RunOptions(n_jobs=req.jobs or os.cpu_count() or 1,
                          job_timeout=req.job_timeout, backend=req.backend)
        run_chunked(tasks, opts, take, stop=lambda: bool(summary.stopped))
    except BaseException:
        stage2.cancel()
        raise
    stage2.finish()
    summary.seconds = time.monotonic() - t0
    # one O_APPEND write, no lock; skipped on a read-only cache (an up-to-date build)
    cache.append_stats({**summary.to_json(), "when": time.time(),
                        "generator": ctx.generator_digest,
                        "phases": {k: round(v, 3) for k, v in summary.phases.items()},
                        "toolchain": tdigest, "request": _request_doc(req)})
    return summary


def check_requests(requests: list[BuildRequest]) -> None:
    """Refuse a run before any of its targets builds: a bad selection (ValueError from the
    walk, ~20 ms a target) or a tool some target needs (ToolchainError, one line)."""
    from wgradcache.compile.preflight import require_tools

    for req in requests:
        select_jobs(req)
    require_tools(req.target for req in requests)


def _request_doc(req: BuildRequest) -> dict:
    return {k: v for k, v in asdict(req).items() if v not in (None, (), 0, False)}
