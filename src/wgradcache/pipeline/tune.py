"""``wgradcache tune``: time the cached kernels that serve each layer on the device, keep the
times in the cache under the device's class, refit the cost model.

Per layer of ``--layers`` (each distinct problem once) and dtype: select's ranking of the
cached kernels that serve it (by the formula and the code objects' counts, not by earlier
timings: a tune re-measures what the model thinks best), its top N or all of them; each is
launched with its contract (``runtime/launch.PreparedLaunch``: dW zeroed before an atomic
split-K launch, the workspace zeroed and stage 2 after a two-stage one; the zeroing is
part of what is timed, as a user's launch pays it) and timed with CUDA events
(``runtime/timing.py``): ``batch`` launches captured into a graph, ``warmup`` untimed
replays, then the median of ``iters`` replays (per launch). A graph, not launches from the
host: those time the host for a kernel shorter than its launch's host work, so rows of the
earlier method are another device class's (``DeviceClass.timing``).
Before the first layer the device is kept busy for ``spin_s`` seconds so its clocks are up.
Where PyTorch with CUDA is importable, cuDNN's time of the layer is taken beside (its
``convolution_backward`` with only the weight gradient, channels-last), the same way: a
``torch.cuda.CUDAGraph`` of ``batch`` calls, replayed.

Rows are written as they finish (merged into the class's file under the writer lock at
least every ``flush_s`` seconds and after every layer), so a killed run keeps every row it
finished except those of the last ``flush_s`` seconds. A launch that fails is reported and
the run goes on. At the end the cost model is refitted to the class's timings.

A tune resumes: a candidate whose row the class's file already holds (same kernel, the
blob its entry names now, problem, dtype, degree) is not timed again, nor a layer's vendor
time the file holds, unless ``remeasure``. A device call may be capped well below what
``--all`` over ``layers/reference.yaml`` takes (~19 000 timings a dtype), so
``max_seconds`` stops the run at the first kernel boundary past it: the rows are written,
the model refitted, and ``TuneReport.remaining`` says how many timings a next run has left.

Buffers are allocated once per layer and dtype (the workspace at the largest a candidate
needs) and the inputs zeroed: a kernel's time does not depend on the values it reads (no
data-dependent control flow in these kernels), and zeros are no NaN or Inf.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field, replace

from wgradcache.cache.store import TargetCache
from wgradcache.cache.timings import (
    DeviceClass,
    TimingRow,
    TimingsFile,
    VendorRow,
    merge_files,
    over_cap,
)

__all__ = ["TuneRequest", "TuneReport", "TuneError", "tune", "plan_tune", "left_to_time"]


class TuneError(ValueError):
    """No device, a layer file that cannot be read, a target without a timing session: one
    line (the CLI exits 2)."""


@dataclass(frozen=True)
class TuneRequest:
    target: str
    layers_file: str
    dtypes: tuple[str, ...] = ("fp16",)
    top: int | None = 8  # None: every kernel that serves
    device: str = "cuda"
    cache_dir: str = "cache"
    warmup: int = 3
    iters: int = 10
    batch: int = 10  # launches per timed sample, back to back
    spin_s: float = 30.0
    flush_s: float = 1.0
    vendor: bool = True  # cuDNN beside, where PyTorch with CUDA is importable
    remeasure: bool = False  # time again what the class's file already holds
    max_seconds: float | None = None  # stop at the first kernel boundary past this
    layer_names: tuple[str, ...] = ()  # only these layers of the file (empty: every one)
    networks: tuple[str, ...] = ()  # only the layers named "<network>/..." of these


@dataclass
class TuneReport:
    target: str
    device: DeviceClass
    rows: list[TimingRow] = field(default_factory=list)
    vendor: list[VendorRow] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # one line per launch that failed
    refit: str = ""
    already: int = 0  # kernel timings the class held and this run did not repeat
    remaining: int = 0  # kernel timings left when ``max_seconds`` stopped the run
    remaining_layers: int = 0  # (layer, dtype) pairs with a timing left

    def left_line(self) -> str:
        """What a run stopped by its budget left, in one line ("" when it finished)."""
        if not self.remaining:
            return ""
        return (f"stopped by --max-seconds: {self.remaining} kernel timing"
                f"{'' if self.remaining == 1 else 's'} of {self.remaining_layers} (layer, "
                "dtype) pair" + ("" if self.remaining_layers == 1 else "s")
                + " remain; the same command goes on where this one stopped")

    def to_json(self) -> dict:
        """What ``tune --import`` reads (a timings document of this run's rows, with the
        target), the failures and what is left."""
        from wgradcache.cache.timings import timings_json

        doc = timings_json(TimingsFile(self.device, tuple(self.rows), tuple(self.vendor)))
        return {"target": self.target, **doc, "failures": self.failures,
                "refit": self.refit, "already_measured": self.already,
                "remaining": self.remaining, "remaining_layers": self.remaining_layers}


@dataclass(frozen=True)
class _Job:
    layer: str
    dtype: str
    problem: object  # ConvProblem
    candidates: tuple  # select.Candidate, best first
    blobs: tuple[str, ...] = ()  # each candidate's blob key when planned
    vendor: bool = True  # the vendor library's time of the layer is wanted


def plan_tune(req: TuneRequest) -> tuple[list[_Job], list[str]]:
    """(per distinct layer problem and dtype, the candidates to time; lines for entries
    skipped as corrupt). TuneError when the layer file cannot be read or a ``--layer`` /
    ``--network`` names none of its layers."""
    from wgradcache.files.capped import Refused, read_capped
    from wgradcache.numerics.layers import load_layers
    from wgradcache.pipeline.select import candidates_from_cache, select

    try:  # a FIFO or a device is refused before load_layers opens it (it would block)
        read_capped(req.layers_file, 16 << 20, follow=True, missing_ok=False)
        layers = load_layers(req.layers_file)
    except Refused as e:
        why = f"{e.detail}, not a regular file" if e.code == "kind" else (
            f"{e.detail} bytes, over 16 MiB" if e.code == "size" else str(e.detail))
        raise TuneError(f"--layers {req.layers_file}: cannot read: {why}") from None
    except (OSError, ValueError) as e:
        raise TuneError(f"--layers {req.layers_file}: {e}") from None
    seen, distinct = set(), []
    for ly in _chosen_layers(layers, req):
        if ly.problem.short() not in seen:
            seen.add(ly.problem.short())
            distinct.append(ly)
    jobs, skipped = [], []
    for dtype in req.dtypes:
        got = candidates_from_cache(req.cache_dir, req.target, dtype)
        skipped += got.skipped
        for ly in distinct:
            ranked = select(req.target, ly.problem, got.specs, costs=got.costs())
            chosen = ranked if req.top is None else ranked[:req.top]
            if chosen:
                jobs.append(_Job(ly.name, dtype, ly.problem, tuple(chosen),
                                 tuple(got.blobs.get(c.key, "") for c in chosen)))
    return jobs, skipped


def _network(name: str) -> str:
    """A layer's network: its name up to the first "/" (``resnet50/l1.conv1``)."""
    return name.split("/", 1)[0]


def _chosen_layers(layers: tuple, req: TuneRequest) -> list:
    """The layers ``req.layer_names`` and ``req.networks`` pick (every one when both are
    empty); TuneError naming a name or network the file does not have."""
    if not req.layer_names and not req.networks:
        return list(layers)
    names = {ly.name for ly in layers}
    nets = list(dict.fromkeys(_network(ly.name) for ly in layers))
    for n in req.layer_names:
        if n not in names:
            raise TuneError(f"--layer {n[:100]!r}: no layer of {req.layers_file} is named so")
    for n in req.networks:
        if n not in nets:
            raise TuneError(f"--network {n[:100]!r}: no layer of {req.layers_file} is in "
                            f"it (NET/...); its networks: {', '.join(nets)}")
    return [ly for ly in layers
            if ly.name in req.layer_names or _network(ly.name) in req.networks]


def left_to_time(jobs: list[_Job], have: TimingsFile | None,
                 remeasure: bool = False) -> tuple[list[_Job], int]:
    """(the jobs with only the candidates ``have`` holds no row of, each job's ``vendor``
    whether ``have`` lacks its vendor time; how many candidates were left out). A row
    counts when it times the blob the candidate's entry named when planned (another blob:
    the kernel changed, and is timed again); a job with nothing left is dropped."""
    if have is None or remeasure:
        return jobs, 0
    from wgradcache.cache.timings import row_key

    rows = {row_key(r) for r in have.rows}
    vendor = {(v.problem, v.dtype) for v in have.vendor}
    out, already = [], 0
    for job in jobs:
        p = job.problem.short()
        keep = [(c, b) for c, b in zip(job.candidates, job.blobs, strict=True)
                if (c.key, b, p, job.dtype, c.degree) not in rows]
        already += len(job.candidates) - len(keep)
        want_vendor = (p, job.dtype) not in vendor
        if keep or want_vendor:
            out.append(replace(job, candidates=tuple(c for c, _ in keep),
                               blobs=tuple(b for _, b in keep), vendor=want_vendor))
    return out, already


def _device_class(name: str, sms: int, driver: str, runtime: str) -> DeviceClass:
    """The class, its texts folded to what a timings file may hold."""
    def fold(text: str, allowed: str, n: int) -> str:
        return re.sub(f"[^{allowed}]", "-", text)[:n]
    from wgradcache.runtime.timing import TIMING

    return DeviceClass(fold(name, "A-Za-z0-9 ._()+-", 100).strip() or "device", sms,
                       fold(driver, "A-Za-z0-9._+-", 40), fold(runtime, "A-Za-z0-9._+-", 40),
                       TIMING)


class _Writer:
    """Merges finished rows into the class's file, at most every ``flush_s`` seconds."""

    def __init__(self, cache: TargetCache, device: DeviceClass, flush_s: float):
        self.cache, self.device, self.flush_s = cache, device, flush_s
        self.rows: list[TimingRow] = []
        self.vendor: list[VendorRow] = []
        self.at = time.monotonic()

    def add(self, row: TimingRow | VendorRow, force: bool = False) -> None:
        (self.rows if isinstance(row, TimingRow) else self.vendor).append(row)
        if force or time.monotonic() - self.at >= self.flush_s:
            self.flush()

    def flush(self) -> None:
        if not self.rows and not self.vendor:
            return
        new = TimingsFile(self.device, tuple(self.rows), tuple(self.vendor))
        with self.cache.lock():
            have = self.cache.read_timings(self.device.slug())
            union = new if have is None else merge_files(have, new)
            if why := over_cap(union):
                raise TuneError(f"tune: the class would hold {why}; stopped")
            self.cache.write_timings(union)
        self.rows, self.vendor = [], []
        self.at = time.monotonic()


def _cudnn(req: TuneRequest):
    """PyTorch, where it is importable with CUDA; else None (no vendor time)."""
    if not req.vendor:
        return None
    try:
        import torch  # type: ignore[import-not-found]
    except Exception:
        return None
    return torch if torch.cuda.is_available() else None


def _cudnn_row(torch, job: _Job, req: TuneRequest, now: float) -> VendorRow:
    """cuDNN's weight gradient of the layer, timed with torch's events."""
    from wgradcache.runtime.timing import torch_graph_samples

    p = job.problem
    td = {"fp16": torch.float16, "bf16": torch.bfloat16}[job.dtype[:4]]
    cl = torch.channels_last
    x = torch.randn(p.N, p.C, p.H, p.W, device="cuda").to(td).contiguous(memory_format=cl)
    dy = torch.randn(p.N, p.K, p.Ho, p.Wo, device="cuda").to(td).contiguous(memory_format=cl)
    w = torch.zeros(p.K, p.cpg, p.Y, p.X, device="cuda", dtype=td).contiguous(
        memory_format=cl)

    def run():
        torch.ops.aten.convolution_backward(dy, x, w, None, [p.stride] * 2, [p.pad] * 2,
                                            [p.dilation] * 2, False, [0, 0], p.groups,
                                            [False, True, False])
    # on tune's own stream (``tune``), the same way as time_launches times ours
    times = torch_graph_samples(torch, torch.cuda.current_stream(), run, req.warmup,
                                req.iters, req.batch)
    return VendorRow("cudnn", p.short(), job.dtype, times[len(times) // 2],
                     times[-1] - times[0], len(times), now)


def tune(req: TuneRequest, advance: Callable[[int], None] | None = None,
         on_total: Callable[[int], None] | None = None, refit=None,
         clock: Callable[[], float] = time.monotonic) -> TuneReport:
    """Time every planned candidate on the device that the class's file does not hold yet
    (module docstring); ``refit(cache, slug)`` runs after the last row is written, its line
    reported; ``clock``: the seconds ``max_seconds`` is counted in."""
    from wgradcache.cache.entry import CorruptEntry
    from wgradcache.runtime.cuda import CudaSession, device_for
    from wgradcache.runtime.timing import device_class_of

    started = clock()
    if req.device != "cuda":
        raise TuneError(f"--device {req.device}: tune times on cuda only (no HIP event "
                        "timing in this build)")
    dev, why = device_for(req.target)
    if dev is None:
        raise TuneError(f"tune: no {req.target} device: {why}")
    jobs, _ = plan_tune(req)
    if not jobs:
        raise TuneError(f"tune: no cached {req.target} kernel serves a layer of "
                        f"{req.layers_file} in {', '.join(req.dtypes)}")
    device = _device_class(*device_class_of(dev))
    cache = TargetCache(req.cache_dir, req.target)
    rep = TuneReport(req.target, device)
    torch = _cudnn(req)
    try:
        have = cache.read_timings(device.slug())
    except CorruptEntry as e:  # not merged into, not overwritten: the user decides
        raise TuneError(f"tune: {e} (`wgradcache verify` reports it; move it away to "
                        "start the class afresh)") from None
    jobs, rep.already = left_to_time(jobs, have, req.remeasure)
    jobs = [j for j in jobs if j.candidates or torch is not None]
    writer = _Writer(cache, device, req.flush_s)
    if on_total is not None:
        on_total(sum(len(j.candidates) for j in jobs))
    deadline = None if req.max_seconds is None else started + req.max_seconds
    # a stream of tune's own: the NULL stream cannot be captured into a graph; with PyTorch,
    # torch's, so cuDNN's graphs and ours run in one order
    stream = torch.cuda.Stream() if torch is not None and jobs else None
    try:
        with (CudaSession(dev, stream=stream.cuda_stream if stream else None) if jobs
              else nullcontext()) as s, (torch.cuda.stream(stream) if stream
                                         else nullcontext()):
            run = _TuneRun(s, cache, req, rep, writer, advance, deadline, clock)
            spun = False
            for i, job in enumerate(jobs):
                past, done = deadline is not None and clock() >= deadline, 0
                if job.candidates and not past:
                    spun, done = _time_job(run, job, spun)
                if past or done < len(job.candidates):  # the budget is spent
                    rep.remaining = len(job.candidates) - done + sum(
                        len(j.candidates) for j in jobs[i + 1:])
                    rep.remaining_layers = len(jobs) - i
                    break
                if torch is not None and job.vendor:
                    try:
                        vendor = _cudnn_row(torch, job, req, time.time())
                    except Exception as e:  # torch's own errors: one failure line, go on
                        rep.failures.append(f"cudnn on {job.problem.short()} {job.dtype}: "
                                            f"{type(e).__name__}: {str(e)[:200]}")
                    else:
                        rep.vendor.append(vendor)  # before add: a flush empties the writer
                        writer.add(vendor)
                writer.flush()
    finally:
        writer.flush()  # a killed run (KeyboardInterrupt, an error) keeps what it timed
    if refit is not None:
        rep.refit = refit(cache, device.slug())
    return rep


@dataclass(frozen=True)
class _TuneRun:
    """What every layer's timing in one ``tune`` shares: the session, the cache, the
    request, where the rows go (the report, the writer), progress and the time budget."""

    session: object
    cache: TargetCache
    req: TuneRequest
    rep: TuneReport
    writer: _Writer
    advance: Callable[[int], None] | None
    deadline: float | None
    clock: Callable[[], float]


def _time_job(run: _TuneRun, job: _Job, spun: bool) -> tuple[bool, int]:
    """The candidates of one layer and dtype on one set of buffers (the workspace at the
    largest any candidate needs), freed after, until ``run.deadline`` passes between two;
    (whether the device has been spun up, how many candidates were done)."""
    from wgradcache.runtime.cuda import CudaError
    from wgradcache.runtime.launch import (
        CodeObject,
        StoredKernel,
        WgradLaunch,
        prepare_launch,
        stage2_code,
    )
    from wgradcache.runtime.timing import spin, time_launches
    from wgradcache.wgrad.abi import buffer_bytes
    from wgradcache.wgrad.split_k import plan_split_k

    s, cache, req, rep, writer = run.session, run.cache, run.req, run.rep, run.writer
    advance, deadline, clock = run.advance, run.deadline, run.clock
    p = job.problem
    plans = {c.key: plan_split_k(c.spec, p, split_k=c.degree) for c in job.candidates}
    sizes = {c.key: buffer_bytes(p, c.spec.dtype, c.spec.dw_dtype, plans[c.key].ws_replicas)
             for c in job.candidates}
    big = {b: max(sz[b] for sz in sizes.values()) for b in ("dy", "x", "dw", "ws")}
    ptr = {b: s.alloc(n) for b, n in big.items()}
    try:
        for b in ("dy", "x"):  # zeros, not whatever the allocation held (NaN, Inf)
            s.memset(ptr[b], 0, big[b])
        for done, cand in enumerate(job.candidates):
            if done and deadline is not None and clock() >= deadline:
                return spun, done
            spec, entry = cand.spec, cache.read_entry(cand.key)
            try:
                if entry is None:
                    raise ValueError("its entry is gone")
                code = CodeObject(cache.read_blob(entry.blob), entry.symbol)
                stage2 = (stage2_code(cache, spec.dw_dtype, spec.ws_replicas)
                          if cand.reduction == "two_stage" else None)
                kernel = StoredKernel(spec, code, stage2)
                launch = prepare_launch(s, WgradLaunch(kernel, p, plans[cand.key]),
                                        {**ptr, "ws": ptr["ws"] if sizes[cand.key]["ws"]
                                         else 0}, sizes[cand.key])
                if not spun and req.spin_s > 0:
                    spin(s, launch.run, req.spin_s)
                spun = True
                timed = time_launches(s, launch.run, req.warmup, req.iters, req.batch)
            except (CudaError, ValueError, FileNotFoundError) as e:
                rep.failures.append(f"{spec.label()} on {p.short()}: {e}")
            else:
                row = TimingRow(cand.key, entry.blob, p.short(), job.dtype, cand.degree,
                                max(timed.median_ms, 1e-6), timed.spread_ms,
                                timed.iterations, time.time())
                rep.rows.append(row)
                writer.add(row)
            if advance is not None:
                advance(1)
    finally:
        for addr in ptr.values():
            if addr:
                s.free(addr)
    return spun, len(job.candidates)
