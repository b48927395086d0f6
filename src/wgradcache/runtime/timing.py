"""Timing launches on an NVIDIA device with CUDA events, and the device's class (what
``cache/timings.py`` files its rows under): the driver calls ``tune`` makes beyond the
launch surface of ``runtime/cuda.py``.

Events, not host clocks: a launch is queued, so the host sees when it was enqueued, not
when it ran. Each timed launch is bracketed by two events on the session's stream
(``cuEventRecord``) and waited for (``cuEventSynchronize``); ``cuEventElapsedTime`` is the
GPU's time between them, in ms (resolution about 0.5 us, CUDA driver API reference,
"Event Management"). The median of the launches is the row's time, max - min its spread.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from wgradcache.runtime.cuda import CudaDevice, CudaSession, _check

__all__ = ["Timed", "time_launches", "device_class_of", "spin"]


@dataclass(frozen=True)
class Timed:
    median_ms: float
    spread_ms: float
    iterations: int


def time_launches(session: CudaSession, run: Callable[[], None], warmup: int,
                  iters: int, batch: int = 1) -> Timed:
    """``run()`` ``warmup`` times untimed, then ``iters`` samples, each ``batch`` launches
    back to back between two events, per launch. One event pair per launch also times the
    host's gap before each launch: on the H100 (12-06) that doubled a 47 us kernel's time
    and cuDNN's alike, and ranked kernels by their launch's host work."""
    cu = session.cu
    for _ in range(warmup):
        run()
    start = _check(cu.cuEventCreate(0), "cuEventCreate")
    end = _check(cu.cuEventCreate(0), "cuEventCreate")
    times = []
    try:
        for _ in range(iters):
            _check(cu.cuEventRecord(start, session.stream), "cuEventRecord")
            for _ in range(batch):
                run()
            _check(cu.cuEventRecord(end, session.stream), "cuEventRecord")
            _check(cu.cuEventSynchronize(end), "cuEventSynchronize")
            times.append(float(_check(cu.cuEventElapsedTime(start, end),
                                      "cuEventElapsedTime")) / batch)
    finally:
        cu.cuEventDestroy(start)
        cu.cuEventDestroy(end)
    return Timed(statistics.median(times), max(times) - min(times), len(times))


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
