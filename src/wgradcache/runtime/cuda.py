"""Launching stored cubins on an NVIDIA GPU through ``cuda-bindings`` (the driver API).

The CUDA counterpart of ``runtime/hip.py``, with the same session surface (alloc, upload,
download, memset, load_kernel, launch, synchronize), so ``runtime/launch.py`` runs one
launch contract on either. ``device_for`` turns a missing package, a missing driver or no
device of the target's compute capability into ``(None, reason)``: ``verify --device auto``
says so in one line and uses the emulator, ``--device cuda`` fails with the reason.

Driver API, not the runtime API: a cubin is a module (``cuModuleLoadData`` takes the stored
bytes unchanged) and the session works in the device's primary context, the one PyTorch
and CuPy use too (``cuDevicePrimaryCtxRetain``), so a benchmark can time our kernels and
cuDNN's on one stream.

Kernel arguments: the explicit parameter block exactly as ``runtime/abi.py`` packs it (the
cubin's own ``EIATTR_KPARAM_INFO`` offsets are checked against ``kernarg_layout`` first),
passed as ``kernelParams``: a ``void*[n]`` whose entry i points at parameter i's bytes
inside that one packed buffer (the driver copies each by the size the cubin records).
cuda-bindings takes an int as an already-built ``void**`` (its ``_HelperKernelParams``).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from wgradcache.runtime import LaunchDims

__all__ = ["CudaDevice", "CudaError", "CudaGraph", "CudaKernel", "CudaSession", "device_for",
           "cuda_driver"]


@dataclass(frozen=True)
class CudaDevice:
    index: int
    arch: str  # "sm_90"
    name: str = ""

    def describe(self) -> str:
        return f"{self.arch} device {self.index}" + (f" ({self.name})" if self.name else "")


class CudaError(RuntimeError):
    """A driver call returned an error code (the call and the code's name in the message)."""

    def __init__(self, call: str, err):
        name = getattr(err, "name", None) or str(err)
        try:
            code = f" ({int(err)})"
        except (TypeError, ValueError):
            code = ""
        super().__init__(f"{call}: {name}{code}")
        self.call, self.err = call, err


def cuda_driver():
    """cuda-bindings' driver module (tests may replace it with a fake)."""
    from cuda.bindings import driver  # type: ignore[import-not-found]

    return driver


def _check(result, call: str):
    """cuda-bindings returns (CUresult, value...) tuples: raise CudaError on an error and
    return the value (None for none, a list for several)."""
    cu = cuda_driver()
    if isinstance(result, tuple):
        err, *rest = result
    else:
        err, rest = result, []
    if err != cu.CUresult.CUDA_SUCCESS:
        raise CudaError(call, err)
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


def device_for(target: str) -> tuple[CudaDevice | None, str]:
    """The first device whose compute capability is ``target`` (``sm_90``: 9.0), or None
    and why not."""
    try:
        cu = cuda_driver()
    except Exception as e:  # not installed
        return None, (f"cuda-bindings unavailable ({type(e).__name__}: {e}); pip install "
                      "'wgradcache[nvidia]' on a machine with an NVIDIA driver")
    try:
        _check(cu.cuInit(0), "cuInit")
        n = _check(cu.cuDeviceGetCount(), "cuDeviceGetCount")
        attr = cu.CUdevice_attribute
        for i in range(n):
            dev = _check(cu.cuDeviceGet(i), "cuDeviceGet")
            major = _check(cu.cuDeviceGetAttribute(
                attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute")
            minor = _check(cu.cuDeviceGetAttribute(
                attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute")
            arch = f"sm_{major}{minor}"
            if arch == target:
                raw = _check(cu.cuDeviceGetName(64, dev), "cuDeviceGetName")
                name = bytes(raw).split(b"\0", 1)[0].decode(errors="replace")
                return CudaDevice(i, arch, name), ""
        return None, f"{n} CUDA device(s), none is {target}"
    except Exception as e:  # no driver, or no device at all
        return None, f"CUDA driver unavailable ({type(e).__name__}: {e})"


@dataclass(frozen=True)
class CudaGraph:
    """A captured graph and its executable (``CudaSession.capture``)."""

    graph: object
    exe: object


@dataclass
class CudaKernel:
    symbol: str
    module: object
    function: object
    image: bytes = field(repr=False)  # kept alive while the module is loaded
    dynamic_shared: int = 0  # the opt-in set so far (cuFuncSetAttribute)


class CudaSession:
    """One device's allocations and modules for the span of a ``with`` block, in its
    primary context; everything is freed / unloaded on exit, also after a failed launch.

    ``stream``: the CUstream handle (an int) launches go to; 0 is the legacy default
    stream; None: a non-blocking stream of the session's own (what ``capture`` needs). A
    benchmark passes PyTorch's stream to order our launches with cuDNN's.
    """

    def __init__(self, device: CudaDevice, stream: int | None = 0):
        self.device = device
        self.cu = cuda_driver()
        self.stream = stream or 0
        self._own_stream = stream is None  # made on entry, destroyed on close
        self._buffers: dict[int, object] = {}
        self._kernels: list[CudaKernel] = []
        self._pending: list[tuple] = []
        self._graphs: list[CudaGraph] = []
        self._ctx = None
        self._dev = None

    def __enter__(self) -> CudaSession:
        cu = self.cu
        _check(cu.cuInit(0), "cuInit")
        self._dev = _check(cu.cuDeviceGet(self.device.index), "cuDeviceGet")
        self._ctx = _check(cu.cuDevicePrimaryCtxRetain(self._dev), "cuDevicePrimaryCtxRetain")
        _check(cu.cuCtxSetCurrent(self._ctx), "cuCtxSetCurrent")
        if self._own_stream:
            flags = int(cu.CUstream_flags.CU_STREAM_NON_BLOCKING)
            self.stream = int(_check(cu.cuStreamCreate(flags), "cuStreamCreate"))
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.close()
        except CudaError:
            if exc_type is None:
                raise

    def close(self) -> None:
        """Synchronize, free every buffer, unload every module, release the context; the
        first error is raised after all were attempted."""
        errors: list[CudaError] = []

        def attempt(result, call):
            try:
                _check(result, call)
            except CudaError as e:
                errors.append(e)

        cu = self.cu
        attempt(cu.cuCtxSynchronize(), "cuCtxSynchronize")
        self._pending.clear()
        for g in self._graphs:
            attempt(cu.cuGraphExecDestroy(g.exe), "cuGraphExecDestroy")
            attempt(cu.cuGraphDestroy(g.graph), "cuGraphDestroy")
        self._graphs.clear()
        if self._own_stream and self.stream:
            attempt(cu.cuStreamDestroy(self.stream), "cuStreamDestroy")
            self.stream = 0
        for handle in self._buffers.values():
            attempt(cu.cuMemFree(handle), "cuMemFree")
        self._buffers.clear()
        for k in self._kernels:
            attempt(cu.cuModuleUnload(k.module), "cuModuleUnload")
        self._kernels.clear()
        if self._ctx is not None:
            attempt(cu.cuDevicePrimaryCtxRelease(self._dev), "cuDevicePrimaryCtxRelease")
            self._ctx = None
        if errors:
            raise errors[0]

    # -- memory ----------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        if nbytes == 0:
            return 0
        handle = _check(self.cu.cuMemAlloc(nbytes), "cuMemAlloc")
        addr = int(handle)
        self._buffers[addr] = handle
        return addr

    def free(self, addr: int) -> None:
        """Free one buffer of this session before the session ends (a tune frees each
        layer's buffers before the next layer's)."""
        handle = self._handle(addr)
        del self._buffers[addr]
        _check(self.cu.cuMemFree(handle), "cuMemFree")

    def _handle(self, addr: int):
        if addr not in self._buffers:
            raise ValueError(f"0x{addr:x} is not a buffer of this session")
        return self._buffers[addr]

    def upload(self, addr: int, host: np.ndarray) -> None:
        host = np.ascontiguousarray(host)
        _check(self.cu.cuMemcpyHtoD(self._handle(addr), host.ctypes.data, host.nbytes),
               "cuMemcpyHtoD")

    def download(self, addr: int, out: np.ndarray) -> None:
        if not out.flags.c_contiguous:
            raise ValueError("download target must be C-contiguous")
        _check(self.cu.cuMemcpyDtoH(out.ctypes.data, self._handle(addr), out.nbytes),
               "cuMemcpyDtoH")

    def memset(self, addr: int, value: int, nbytes: int) -> None:
        """Queued on the session's stream, in order with its launches (a graph captures
        it; the legacy ``cuMemsetD8`` runs on the NULL stream, which no capture takes)."""
        _check(self.cu.cuMemsetD8Async(self._handle(addr), value, nbytes, self.stream),
               "cuMemsetD8Async")

    # -- kernels ---------------------------------------------------------------------------
    def load_kernel(self, cubin: bytes, symbol: str) -> CudaKernel:
        image = bytes(cubin)
        module = _check(self.cu.cuModuleLoadData(image), "cuModuleLoadData")
        try:
            function = _check(self.cu.cuModuleGetFunction(module, symbol.encode()),
                              f"cuModuleGetFunction({symbol})")
        except CudaError:
            self.cu.cuModuleUnload(module)
            raise
        k = CudaKernel(symbol, module, function, image)
        self._kernels.append(k)
        return k

    def launch(self, kernel: CudaKernel, dims: LaunchDims, kernargs: bytes,
               offsets: tuple[int, ...] = ()) -> None:
        """Enqueue one launch on the session's stream. ``kernargs``: the packed block
        (``abi.pack``); ``offsets``: each parameter's byte offset in it (``kernarg_layout``);
        ``dims.shared``: dynamic shared bytes (``spec.dynamic_lds_bytes``). Past 48 KB the
        function must opt in first (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES), once
        per kernel and size."""
        grid, block, shared = dims.grid, dims.block, dims.shared
        if shared > kernel.dynamic_shared:
            attr = self.cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            _check(self.cu.cuFuncSetAttribute(kernel.function, attr, int(shared)),
                   f"cuFuncSetAttribute({kernel.symbol}, dynamic shared {shared} B)")
            kernel.dynamic_shared = shared
        buf = ctypes.create_string_buffer(bytes(kernargs), max(1, len(kernargs)))
        base = ctypes.addressof(buf)
        params = (ctypes.c_void_p * max(1, len(offsets)))(*[base + o for o in offsets])
        self._pending.append((buf, params))
        gx, gy, gz = (int(g) for g in grid)
        _check(self.cu.cuLaunchKernel(kernel.function, gx, gy, gz, int(block), 1, 1,
                                      int(shared), self.stream, ctypes.addressof(params), 0),
               f"cuLaunchKernel({kernel.symbol})")

    def synchronize(self) -> None:
        _check(self.cu.cuCtxSynchronize(), "cuCtxSynchronize")
        self._pending.clear()

    # -- graphs ----------------------------------------------------------------------------
    def capture(self, run: Callable[[], None], times: int) -> CudaGraph:
        """``run()`` ``times`` times captured into one graph on the session's stream (the
        memsets and launches it queues become the graph's nodes, kernel arguments copied
        at capture), not executed; ``replay`` runs it. Why: a replay is one host call for
        all of them, so a kernel shorter than the host's work per launch (Python, ctypes,
        the driver: about 30 us a launch on the H100's host, 12-07) is timed at its own
        rate, not the host's. The legacy NULL stream (``stream`` 0) cannot be captured."""
        if not self.stream:
            raise ValueError("a graph needs a stream of its own: the session runs on the "
                             "legacy default stream (stream 0)")
        cu = self.cu
        mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        _check(cu.cuStreamBeginCapture(self.stream, mode), "cuStreamBeginCapture")
        try:
            for _ in range(times):
                run()
        except BaseException:  # end the capture, or the stream stays capturing
            err, *graph = cu.cuStreamEndCapture(self.stream)
            if err == cu.CUresult.CUDA_SUCCESS and graph:
                cu.cuGraphDestroy(graph[0])
            raise
        graph = _check(cu.cuStreamEndCapture(self.stream), "cuStreamEndCapture")
        try:
            exe = _check(cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        except CudaError:
            cu.cuGraphDestroy(graph)
            raise
        g = CudaGraph(graph, exe)
        self._graphs.append(g)
        return g

    def replay(self, graph: CudaGraph) -> None:
        """Queue one run of ``graph`` (``capture``) on the session's stream."""
        _check(self.cu.cuGraphLaunch(graph.exe, self.stream), "cuGraphLaunch")

    def release(self, graph: CudaGraph) -> None:
        """Destroy ``graph`` before the session ends (close destroys the rest)."""
        self._graphs.remove(graph)
        _check(self.cu.cuGraphExecDestroy(graph.exe), "cuGraphExecDestroy")
        _check(self.cu.cuGraphDestroy(graph.graph), "cuGraphDestroy")
