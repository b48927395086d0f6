"""The build's workers: pure tasks (job -> bytes) and the runs that survive LLVM's exits.

A task never reads or writes the cache: the coordinator hands it the content keys it may
relink to (``TargetCache.relinkable``, listed once per build on the coordinator's disk), so
a Dask worker's own ``./cache`` never decides anything. The set travels with every task
(~210 kB pickled for a full cache, 0.2 ms): cheap beside a compile, and only paid by jobs
that are not up to date. A task is a frozen ``CompileJob`` and comes back as a
``JobResult``: compiled here (``blob`` + ``meta``), a relink (a blob with this content key
exists: no compile), or an ``error``, transient (retried by the next build) or permanent
(only on --retry-failed). ``verify --level reproduce`` runs ``ReproduceJob``s the same way.

LLVM can kill a worker (``Cannot select`` aborts, an LDS overflow exits): the chunk's
unfinished jobs are retried one at a time in an isolated child with the job timeout
(``Task.alone``).

The coordinator can die too (SIGKILL): every loky worker starts with
``lifetime.end_with_parent`` as its initializer (``parallel_config``'s backend arguments
reach loky's executor), so the kernel ends it with the coordinator and loky's resource
trackers follow; a Dask worker belongs to its cluster and is left alone.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from wgradcache.cache.entry import BlobMeta
from wgradcache.cache.store import blank_symbol, content_key, sha256_bytes
from wgradcache.compile.lifetime import end_with_parent
from wgradcache.model.spec import KernelSpec
from wgradcache.pipeline.plan import DEFAULT_JOB_TIMEOUT

__all__ = ["RunOptions", "Task", "CompileJob", "JobResult", "Stage2Job", "ReproduceJob",
           "ReproduceResult", "codegen_context", "job_task", "job_alone", "metadata",
           "run_chunked", "run_one_worker", "reproduce_task", "reproduce_alone"]


@dataclass(frozen=True)
class RunOptions:
    """How ``run_chunked`` runs a list of tasks: the build's and verify's one set of knobs
    (a caller that is not a build states these, rather than a ``BuildRequest``)."""

    n_jobs: int  # worker processes (at most one per task)
    job_timeout: float = DEFAULT_JOB_TIMEOUT  # seconds per task, then it is retried alone
    backend: str = "loky"  # or "dask": the client the caller connected


class Task(Protocol):
    """What ``run_chunked`` runs: a picklable job that knows its key, its work in a worker,
    its retry in an isolated child, and the result of not being run (the build stopped).
    Each result has the task's ``key``."""

    @property
    def key(self) -> str: ...

    def work(self): ...

    def alone(self, timeout: float): ...

    def not_run(self): ...


# compile/isolate.py's words for a compile it killed at the job timeout: the machine was
# busy or the job is slow, not wrong, so the next build tries again
_TIMED_OUT = "codegen timed out"
_STOPPED = "not compiled: the build stopped"


@dataclass(frozen=True)
class JobResult:
    """A ``CompileJob``'s outcome, from the worker to the publisher. Exactly one of: a
    ``blob`` compiled here (with its ``meta``), a ``relink`` (the coordinator has a blob of
    this ``ckey``), or an ``error`` (``transient``: the next build compiles it again;
    ``stopped``: never run, the build stopped). ``t`` is the worker's seconds by phase."""

    key: str  # the job's identity key
    t: dict[str, float] = field(default_factory=dict)
    symbol: str = ""
    ir_sha256: str = ""  # of the IR with the symbol blanked
    ckey: str = ""
    blob: bytes | None = None
    meta: BlobMeta | None = None
    relink: bool = False
    error: str = ""
    transient: bool = False
    stopped: bool = False


@dataclass(frozen=True)
class CompileJob:
    """One build job as it travels to a worker: the spec and what the coordinator settled
    for the whole build (codegen options, toolchain identity, whether to check the spec
    against the rules, the content keys it can relink)."""

    spec: KernelSpec
    options: dict
    toolchain: dict
    check: bool = True
    relinkable: frozenset[str] = frozenset()

    @property
    def key(self) -> str:
        return self.spec.identity_key()

    def work(self) -> JobResult:
        return job_task(self)

    def alone(self, timeout: float) -> JobResult:
        return job_alone(self, timeout)

    def not_run(self) -> JobResult:
        return JobResult(self.key, error=_STOPPED, transient=True, stopped=True)


def codegen_context(target: str | None = None) -> tuple[dict, dict, str]:
    """(codegen options, toolchain identity, toolchain digest) of this process for
    ``target`` (None: the AMD targets'; ``sm_90`` has ptxas in its identity)."""
    from wgradcache.compile.codegen import CodegenOptions
    from wgradcache.compile.toolchain import toolchain_identity

    tc = toolchain_identity(target)
    return CodegenOptions().to_dict(), tc.to_dict(), tc.digest()


def _emit(job: CompileJob) -> tuple[JobResult, str]:
    """(result, IR text), or (result with a permanent error, "") for a generator bug."""
    from wgradcache.wgrad.emit import emit_ir

    spec = job.spec
    t0 = time.perf_counter()
    try:
        k = emit_ir(spec, check=job.check)
    except Exception as e:  # a generator bug is this job's failure, not the build's
        return JobResult(job.key, error=f"emit: {type(e).__name__}: {e}"), ""
    return (JobResult(job.key, t={"emit": time.perf_counter() - t0}, symbol=k.symbol,
                      ir_sha256=sha256_bytes(blank_symbol(k.ir_text, k.symbol).encode()),
                      ckey=content_key(k.ir_text, k.symbol, spec.target, job.options,
                                       job.toolchain)),
            k.ir_text)


def metadata(obj, target: str, spec: KernelSpec | None) -> BlobMeta:
    """The sidecar of an object compiled for ``target`` (the code object's record, ISA
    statistics, listing): of ``spec``'s wgrad kernel, or of the stage-2 kernel (None)."""
    from wgradcache.model.backends import backend_of
    from wgradcache.wgrad.abi import record_facts

    return BlobMeta(code_object=obj.info.record(record_facts(spec)),
                    isa=backend_of(target).isa_stats(obj.asm, obj.listing),
                    listing=obj.listing, blob_size=len(obj.hsaco),
                    blob_sha256=sha256_bytes(obj.hsaco))


def _toolchain_mismatch(toolchain: dict, target: str | None = None) -> str:
    """Why this worker must not compile for a coordinator with ``toolchain`` (a dask worker
    on another machine, say, with another LLVM or LLD: its bytes would be filed under the
    coordinator's content key), or "" when the two agree."""
    from wgradcache.compile.toolchain import identity_digest, keyed_fields, toolchain_identity

    mine = toolchain_identity(target)
    if mine.digest() == identity_digest(toolchain):
        return ""
    diff = [k for k, v in keyed_fields(mine.to_dict()).items() if toolchain.get(k) != v]
    return ("this worker's toolchain differs from the coordinator's in "
            + ", ".join(f"{k} ({getattr(mine, k)!r} here, {toolchain.get(k)!r} there)"
                        for k in diff))


def _settle(job: CompileJob) -> tuple[JobResult, str]:
    """Emit and key one job: (result, IR to compile), or (result, "") when nothing is left
    to compile (an emit error, or a content key the coordinator can relink)."""
    res, ir = _emit(job)
    if res.error:
        return res, ""
    if res.ckey in job.relinkable:
        return replace(res, relink=True), ""
    return res, ir


def job_task(job: CompileJob) -> JobResult:
    """One job in a worker: emit, key, and compile unless the coordinator can relink that
    key. Never raises; an LLVM exit kills only this worker."""
    from wgradcache.compile.codegen import CodegenOptions, compile_ir

    mismatch = _toolchain_mismatch(job.toolchain, job.spec.target)
    if mismatch:  # a misconfigured worker, not a property of the job
        return JobResult(job.key, error=mismatch, transient=True)
    res, ir = _settle(job)
    if not ir:
        return res
    try:
        obj = compile_ir(ir, job.spec.target, CodegenOptions())
        t0 = time.perf_counter()
        meta = metadata(obj, job.spec.target, job.spec)
        t = {**res.t, **{k: v for k, v in obj.timings.items() if k != "total"},
             "isa_stats": time.perf_counter() - t0}
        return replace(res, t=t, blob=obj.hsaco, meta=meta)
    except Exception as e:  # parse/verify errors come back as Python exceptions
        return replace(res, error=f"{type(e).__name__}: {e}")


def job_alone(job: CompileJob, timeout: float) -> JobResult:
    """The retry: the compile in its own child process, so LLVM's exit is only its own."""
    from wgradcache.compile.codegen import CodegenOptions
    from wgradcache.compile.isolate import compile_isolated

    # emitting is pure Python: safe in this process
    res, ir = _settle(job)
    if not ir:
        return res
    out = compile_isolated(ir, job.spec.target, CodegenOptions(), timeout=timeout)
    if not out.ok:
        return replace(res, error=out.error, transient=out.error.startswith(_TIMED_OUT))
    try:
        return replace(res, blob=out.obj.hsaco, meta=metadata(out.obj, job.spec.target, job.spec))
    except Exception as e:
        return replace(res, error=f"{type(e).__name__}: {e}")


@dataclass(frozen=True)
class Stage2Job:
    """A stage-2 companion as a job to emit again: keyed by (target, dW dtype, R)."""

    target: str
    dw_dtype: str
    ws_replicas: int


@dataclass(frozen=True)
class ReproduceResult:
    """A ``ReproduceJob``'s outcome: the compiled ``blob`` and the content key of the IR it
    came from, or the ``error`` (``ckey`` is known once the IR was emitted)."""

    key: str
    ckey: str = ""
    blob: bytes | None = None
    error: str = ""


@dataclass(frozen=True)
class ReproduceJob:
    """``verify --level reproduce``'s job in a worker: a stored kernel (a walk job or a
    stage-2 companion) to compile again under the ``symbol`` its stored binary holds, with
    this machine's codegen options and toolchain identity."""

    key: str  # the entry's identity key, or the stage-2 record's name
    job: KernelSpec | Stage2Job
    symbol: str
    options: dict
    toolchain: dict

    def work(self) -> ReproduceResult:
        return reproduce_task(self)

    def alone(self, timeout: float) -> ReproduceResult:
        return reproduce_alone(self, timeout)

    def not_run(self) -> ReproduceResult:
        return ReproduceResult(self.key, error=_STOPPED)


def _stored_ir(rj: ReproduceJob) -> tuple[str, str]:
    """(IR to compile, its content key) of a stored kernel: a walk job, or a stage-2
    companion, emitted as the build emits it, with the kernel named ``symbol``. Identities
    whose IR differs only in the kernel's name share one blob (the content key blanks the
    name), compiled under the name of the first: so the bytes to reproduce are those of
    the name the stored binary holds."""
    job = rj.job
    if isinstance(job, KernelSpec):
        from wgradcache.wgrad.emit import emit_ir

        k = emit_ir(job, check=False)
        ir, emitted = k.ir_text, k.symbol
    else:
        from wgradcache.kernel.lower import lower
        from wgradcache.wgrad.stage2 import build_stage2

        kd = build_stage2(job.target, job.dw_dtype, job.ws_replicas)
        ir, emitted = lower(kd, job.target), kd.name
    ckey = content_key(ir, emitted, job.target, rj.options, rj.toolchain)
    return ir.replace(emitted, rj.symbol), ckey


def reproduce_task(rj: ReproduceJob) -> ReproduceResult:
    """``verify --level reproduce`` in a worker: the build's compile of one stored kernel
    again. Never raises, and an LLVM exit kills only this worker (``reproduce_alone``
    retries it)."""
    from wgradcache.compile.codegen import CodegenOptions, compile_ir

    mismatch = _toolchain_mismatch(rj.toolchain, rj.job.target)
    if mismatch:
        return ReproduceResult(rj.key, error=mismatch)
    try:
        ir, ckey = _stored_ir(rj)
    except Exception as e:  # a generator bug
        return ReproduceResult(rj.key, error=f"emit: {type(e).__name__}: {e}")
    try:
        return ReproduceResult(rj.key, ckey, compile_ir(ir, rj.job.target, CodegenOptions(),
                                                        listing="none").hsaco)
    except Exception as e:
        return ReproduceResult(rj.key, ckey, error=f"{type(e).__name__}: {e}")


def reproduce_alone(rj: ReproduceJob, timeout: float) -> ReproduceResult:
    """``reproduce_task``'s retry: the compile in its own child process."""
    from wgradcache.compile.codegen import CodegenOptions
    from wgradcache.compile.isolate import compile_isolated

    try:
        ir, ckey = _stored_ir(rj)
    except Exception as e:
        return ReproduceResult(rj.key, error=f"emit: {type(e).__name__}: {e}")
    out = compile_isolated(ir, rj.job.target, CodegenOptions(), timeout=timeout,
                           listing="none")
    if not out.ok:
        return ReproduceResult(rj.key, ckey, error=out.error)
    return ReproduceResult(rj.key, ckey, out.obj.hsaco)


def _work(task: Task):
    """A task's work in a worker: a module function, so the pickle names it."""
    return task.work()


def run_chunked(tasks: Sequence[Task], opts: RunOptions, on_result: Callable[[object], None],
                stop: Callable[[], bool] | None = None) -> None:
    """Run tasks in chunks through joblib; on a dead worker or a timeout, retry the chunk's
    unfinished tasks alone (``Task.alone``). Chunks are large (a barrier each) because
    deaths are rare.

    Only joblib's own errors mean "retry": ``on_result`` runs outside that guard, so an
    error of the caller is never mistaken for a dead worker (it must not raise).

    ``stop``: asked after each result; once true, the tasks not yet finished are not run
    (the chunk's generator is closed, which cancels its pending tasks) and each comes back
    as its ``not_run`` result, so every task still gets exactly one ``on_result``."""
    if not tasks:
        return
    # a worker is a process: none that would get no task
    opts = replace(opts, n_jobs=min(opts.n_jobs, len(tasks)))
    stop = stop or (lambda: False)
    if opts.n_jobs == 1 and opts.backend != "dask":
        run_one_worker(tasks, opts, on_result, stop)
        return
    import joblib

    chunk = max(opts.n_jobs * 32, 64)
    # The same initializer arguments every chunk, so joblib reuses one executor.
    ctx = (joblib.parallel_config(backend="dask") if opts.backend == "dask"
           else joblib.parallel_config(backend="loky", initializer=end_with_parent,
                                       initargs=(os.getpid(),)))
    with ctx:
        for start in range(0, len(tasks), chunk):
            done: set[str] = set()
            if not stop():
                done = _run_chunk(tasks[start:start + chunk], opts, on_result, stop)
            if stop():  # what is left of this chunk and every later one: not run
                for t in tasks[start:]:
                    if t.key not in done:
                        on_result(t.not_run())
                return


def _run_chunk(part: Sequence[Task], opts: RunOptions, on_result: Callable[[object], None],
               stop: Callable[[], bool]) -> set[str]:
    """One chunk of ``run_chunked``: the keys of the tasks that got their result."""
    import joblib

    done: set[str] = set()
    par = joblib.Parallel(n_jobs=opts.n_jobs, timeout=opts.job_timeout,
                          return_as="generator_unordered", batch_size=1,
                          pre_dispatch="2*n_jobs")
    results = iter(par(joblib.delayed(_work)(t) for t in part))
    while True:
        try:
            res = next(results)
        except StopIteration:
            return done
        except Exception:  # TerminatedWorkerError, TimeoutError, a dead dask worker
            for t in part:
                if t.key not in done:
                    done.add(t.key)
                    on_result(t.alone(opts.job_timeout))
            return done
        done.add(res.key)
        on_result(res)
        if stop():
            with warnings.catch_warnings():  # the cancel is the point: joblib's
                # "N tasks ... have been cancelled" warning would be a second stderr line
                warnings.filterwarnings("ignore", r".* tasks which were still being "
                                        "processed by the workers have been cancelled",
                                        UserWarning)
                getattr(results, "close", lambda: None)()  # cancels the pending tasks
            return done


def run_one_worker(tasks: Sequence[Task], opts: RunOptions,
                   on_result: Callable[[object], None],
                   stop: Callable[[], bool] = lambda: False) -> None:
    """One worker process, one task at a time. joblib runs ``n_jobs=1`` in this process
    (``SequentialBackend``), where an LLVM exit would end the build and no timeout holds;
    a loky executor keeps the worker a separate process. A dead worker or a timeout
    retries that task alone and replaces the worker.

    The executor is this run's own, not loky's reusable one: joblib reuses that singleton
    for ``Parallel`` and breaks on one it did not create (``_temp_folder_manager``)."""
    from concurrent.futures import TimeoutError as FutureTimeout

    from joblib.externals.loky import ProcessPoolExecutor

    def worker() -> ProcessPoolExecutor:
        return ProcessPoolExecutor(max_workers=1, initializer=end_with_parent,
                                   initargs=(os.getpid(),))

    executor = worker()
    try:
        for t in tasks:
            if stop():
                on_result(t.not_run())
                continue
            try:
                res = executor.submit(_work, t).result(timeout=opts.job_timeout)
            except Exception as e:  # TerminatedWorkerError, BrokenProcessPool, a timeout
                executor.shutdown(wait=False, kill_workers=isinstance(e, FutureTimeout))
                executor = worker()
                res = t.alone(opts.job_timeout)
            on_result(res)
    finally:
        executor.shutdown(wait=False, kill_workers=True)
