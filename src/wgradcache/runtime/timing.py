"""Timing launches on an NVIDIA device with CUDA events, and the device's class (what
``cache/timings.py`` files its rows under): the driver calls ``tune`` makes beyond the
launch surface of ``runtime/cuda.py``.

Events, not host clocks: a launch is queued, so the host sees when it was enqueued, not
when it ran. Each sample is one replay of a graph of ``batch`` launches, bracketed by two
events on the session's stream (``cuEventRecord``) and waited for
(``cuEventSynchronize``); ``cuEventElapsedTime`` is the GPU's time between them, in ms
(resolution about 0.5 us, CUDA driver API reference, "Event Management"). The median of
the samples over ``batch`` is the row's time, max - min its spread.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from wgradcache.runtime.cuda import CudaDevice, CudaSession, _check

__all__ = ["Timed", "TIMING", "time_launches", "torch_graph_samples", "device_class_of",
           "spin"]

# the method of ``time_launches``, part of a device class (``DeviceClass.timing``): rows
# timed another way are another class's, never ranked together
TIMING = "graph"


@dataclass(frozen=True)
class Timed:
    median_ms: float
    spread_ms: float
    iterations: int


def time_launches(session: CudaSession, run: Callable[[], None], warmup: int,
                  iters: int, batch: int = 1) -> Timed:
    """``batch`` runs of ``run()`` captured into one graph (``CudaSession.capture``), the
    graph replayed ``warmup`` times untimed, then ``iters`` samples of one replay between
    two events, per launch. Launches from the host, even back to back, time the host when
    the kernel is the shorter: on the H100 (12-07) every pointwise layer of 28-62 us
    measured 57-60 us in one run and 28-31 in another whatever the kernel, so the ranking
    was noise. ``TIMING`` names this method in the device class the rows are filed under."""
    cu = session.cu
    graph = session.capture(run, batch)
    start = end = None
    times = []
    try:
        for _ in range(warmup):
            session.replay(graph)
        start = _check(cu.cuEventCreate(0), "cuEventCreate")
        end = _check(cu.cuEventCreate(0), "cuEventCreate")
        for _ in range(iters):
            _check(cu.cuEventRecord(start, session.stream), "cuEventRecord")
            session.replay(graph)
            _check(cu.cuEventRecord(end, session.stream), "cuEventRecord")
            _check(cu.cuEventSynchronize(end), "cuEventSynchronize")
            times.append(float(_check(cu.cuEventElapsedTime(start, end),
                                      "cuEventElapsedTime")) / batch)
    finally:
        for ev in (start, end):
            if ev is not None:
                cu.cuEventDestroy(ev)
        session.release(graph)
    return Timed(statistics.median(times), max(times) - min(times), len(times))


def torch_graph_samples(torch, stream, run: Callable[[], None], warmup: int, iters: int,
                        batch: int) -> list[float]:
    """``time_launches`` for work PyTorch queues (cuDNN's): ``max(1, warmup)`` eager calls
    (cuDNN picks its algorithm and allocates before a capture may), ``batch`` calls captured
    into a ``torch.cuda.CUDAGraph`` on ``stream`` (a ``torch.cuda.Stream``, never the NULL
    stream), ``warmup`` untimed replays, then ``iters`` replays each between two events:
    the per-call milliseconds of each sample, ascending (the caller takes its middle)."""
    for _ in range(max(1, warmup)):
        run()
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(batch):
            run()
    for _ in range(warmup):
        graph.replay()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(stream)
        graph.replay()
        b.record(stream)
        b.synchronize()
        times.append(a.elapsed_time(b) / batch)
    del graph
    return sorted(times)


def spin(session: CudaSession, run: Callable[[], None], seconds: float) -> int:
    """Keep the device busy with ``run()`` for ``seconds`` (an idle H200 sits at 345 MHz:
    the first timings would be taken while the clock ramps; benchmarks/device_speed.py's
    ``spin_up`` says what 3 s against 30 s did); how many launches it took."""
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(8):
            run()
        session.synchronize()
        n += 8
    return n


def device_class_of(device: CudaDevice) -> tuple[str, int, str, str]:
    """(name, SM count, driver version, runtime version) of ``device``: the driver's
    answers (``cuDeviceGetName``, the multiprocessor count attribute, ``cuDriverGetVersion``)
    and the cuda-bindings version that made the calls (the library side of the launch)."""
    from wgradcache.runtime.cuda import cuda_driver

    cu = cuda_driver()
    _check(cu.cuInit(0), "cuInit")
    dev = _check(cu.cuDeviceGet(device.index), "cuDeviceGet")
    raw = _check(cu.cuDeviceGetName(64, dev), "cuDeviceGetName")
    name = bytes(raw).split(b"\0", 1)[0].decode(errors="replace").strip()
    sms = _check(cu.cuDeviceGetAttribute(
        cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
        "cuDeviceGetAttribute")
    driver = _check(cu.cuDriverGetVersion(), "cuDriverGetVersion")
    runtime = str(getattr(cu, "__version__", "") or _bindings_version())
    return name, int(sms), str(driver), runtime


def _bindings_version() -> str:
    try:
        from importlib.metadata import version

        return version("cuda-bindings")
    except Exception:  # not installed as a distribution (a test's fake)
        return ""
