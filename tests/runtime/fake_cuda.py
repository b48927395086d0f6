"""A host-memory stand-in for cuda-bindings' ``cuda.bindings.driver``: the calls
``runtime/cuda.py`` makes, as the driver answers them, as far as the launcher can tell.

* device memory is host memory at fake addresses, cuMemAlloc's filled with 0xFF (NaN);
* cuModuleLoadData parses the cubin (``read_cubin``) and refuses another SM;
  cuModuleGetFunction finds only its own symbol;
* cuLaunchKernel reads ``kernelParams`` as the driver does: a ``void*[n]`` (n = the cubin's
  parameter count), entry i the address of parameter i's bytes, read with the size the
  cubin's ``EIATTR_KPARAM_INFO`` gives; pointers resolve to fake allocations; then the
  emulator runs the KernelDef rebuilt from the symbol on the launch's grid.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np
from fake_hip import _STAGE2, Launch

from wgradcache.compile.cubin import read_cubin
from wgradcache.kernel.emulate import EmulationError, emulate
from wgradcache.model.spec import from_label
from wgradcache.pipeline.emulate import cached_kernel
from wgradcache.wgrad.kernel import kernel_symbol
from wgradcache.wgrad.stage2 import build_stage2

_STATIC_SHARED = 48 * 1024  # dynamic shared memory a function may take without the opt-in
_MAX_DYNAMIC_SHARED = 232448  # the H100/H200's per-block opt-in limit, 227 KB


def _kernel_def(symbol: str):
    """The KernelDef behind a cubin's symbol: ``wgrad_sm_90_<label rest>`` or stage 2."""
    m = _STAGE2.match(symbol)
    if m:
        return build_stage2("sm_90", m["dw"], int(m["r"]))
    head = "wgrad_sm_90_"
    if not symbol.startswith(head):
        raise AssertionError(f"not an sm_90 wgrad symbol: {symbol}")
    rest = symbol[len(head):].replace("_", "-").replace("two-stage", "two_stage")
    spec = from_label("sm_90-" + rest)
    if kernel_symbol(spec) != symbol:
        raise AssertionError(f"{symbol} does not round-trip through its label")
    return cached_kernel(spec)


class CUresult(IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_NO_DEVICE = 100
    CUDA_ERROR_INVALID_DEVICE = 101
    CUDA_ERROR_INVALID_IMAGE = 200
    CUDA_ERROR_NO_BINARY_FOR_GPU = 209
    CUDA_ERROR_INVALID_HANDLE = 400
    CUDA_ERROR_ILLEGAL_STATE = 401
    CUDA_ERROR_NOT_FOUND = 500
    CUDA_ERROR_LAUNCH_FAILED = 719
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900


class CUdevice_attribute(IntEnum):  # noqa: N801 - cuda-bindings' names
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76


OK = (CUresult.CUDA_SUCCESS,)
_BASE = 0x7E00_0000_0000


class CUdeviceptr:
    def __init__(self, addr: int):
        self.addr = addr

    def __int__(self) -> int:
        return self.addr


@dataclass
class _Module:
    co: object
    loaded: bool = True


@dataclass
class _Function:
    module: _Module
    symbol: str
    max_dynamic_shared: int = _STATIC_SHARED  # the driver's default without the opt-in


class CUfunction_attribute(IntEnum):
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


class CUstream_flags(IntEnum):  # noqa: N801
    CU_STREAM_NON_BLOCKING = 1


class CUstreamCaptureMode(IntEnum):  # noqa: N801
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1


@dataclass
class FakeCuda:
    archs: tuple[str, ...] = ("sm_90",)
    allocations: dict = field(default_factory=dict)
    launches: list = field(default_factory=list)
    faults: list = field(default_factory=list)
    streams: list = field(default_factory=list)
    retained: int = 0
    _next: int = _BASE
    # timing: a clock that each launch moves by launch_ms[symbol] ms (default 0.001 ms per
    # CTA), read by cuEventRecord; the emulator's own run time is not what the fake reports
    launch_ms: dict = field(default_factory=dict)
    clock_ms: float = 0.0
    events: dict = field(default_factory=dict)
    sm_count: int = 132
    driver_version: int = 13000
    # streams made (cuStreamCreate) and destroyed; captures in progress (stream -> the
    # nodes recorded), captured graphs, replays, destroyed executables, eager memsets
    created_streams: list = field(default_factory=list)
    destroyed_streams: list = field(default_factory=list)
    capturing: dict = field(default_factory=dict)
    graphs: list = field(default_factory=list)
    replays: int = 0
    destroyed_graphs: list = field(default_factory=list)
    memsets: list = field(default_factory=list)

    CUresult = CUresult
    CUdevice_attribute = CUdevice_attribute
    CUfunction_attribute = CUfunction_attribute
    CUstream_flags = CUstream_flags
    CUstreamCaptureMode = CUstreamCaptureMode

    def cuInit(self, flags):
        return OK

    def cuDeviceGetCount(self):
        if not self.archs:
            return CUresult.CUDA_ERROR_NO_DEVICE, 0
        return CUresult.CUDA_SUCCESS, len(self.archs)

    def cuDeviceGet(self, ordinal):
        if not 0 <= ordinal < len(self.archs):
            return CUresult.CUDA_ERROR_INVALID_DEVICE, None
        return CUresult.CUDA_SUCCESS, ordinal

    def cuDeviceGetAttribute(self, attrib, dev):
        if attrib == CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
            return CUresult.CUDA_SUCCESS, self.sm_count
        cc = self.archs[dev][3:]
        if attrib == CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
            return CUresult.CUDA_SUCCESS, int(cc[:-1])
        return CUresult.CUDA_SUCCESS, int(cc[-1])

    def cuDeviceGetName(self, length, dev):
        return CUresult.CUDA_SUCCESS, b"Fake H200".ljust(length, b"\0")

    def cuDriverGetVersion(self):
        return CUresult.CUDA_SUCCESS, self.driver_version

    # -- events: the fake clock ----------------------------------------------------------
    def cuEventCreate(self, flags):
        handle = len(self.events) + 1
        self.events[handle] = None
        return CUresult.CUDA_SUCCESS, handle

    def cuEventRecord(self, event, stream):
        if event not in self.events:
            return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
        self.events[event] = self.clock_ms
        return OK

    def cuEventSynchronize(self, event):
        return OK if self.events.get(event) is not None else (
            CUresult.CUDA_ERROR_INVALID_HANDLE,)

    def cuEventElapsedTime(self, start, end):
        a, b = self.events.get(start), self.events.get(end)
        if a is None or b is None:
            return CUresult.CUDA_ERROR_INVALID_HANDLE, 0.0
        return CUresult.CUDA_SUCCESS, b - a

    def cuEventDestroy(self, event):
        if self.events.pop(event, "gone") == "gone":
            return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
        return OK

    def cuDevicePrimaryCtxRetain(self, dev):
        self.retained += 1
        self.current = dev
        return CUresult.CUDA_SUCCESS, ("ctx", dev)

    def cuDevicePrimaryCtxRelease(self, dev):
        self.retained -= 1
        return OK

    def cuCtxSetCurrent(self, ctx):
        return OK

    def cuCtxSynchronize(self):
        return OK

    def cuMemAlloc(self, size):
        addr = self._next
        self._next += -(-size // 4096) * 4096 + 4096
        self.allocations[addr] = np.full(size, 0xFF, np.uint8)
        return CUresult.CUDA_SUCCESS, CUdeviceptr(addr)

    def cuMemFree(self, ptr):
        if int(ptr) not in self.allocations:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        del self.allocations[int(ptr)]
        return OK

    def _span(self, addr: int, n: int):
        for base, mem in self.allocations.items():
            if base <= addr and addr + n <= base + mem.size:
                return mem[addr - base:addr - base + n]
        return None

    def cuMemcpyHtoD(self, dst, src, n):
        d = self._span(int(dst), n)
        if d is None or not isinstance(src, int):
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        d[:] = np.frombuffer(ctypes.string_at(src, n), np.uint8)
        return OK

    def cuMemcpyDtoH(self, dst, src, n):
        s = self._span(int(src), n)
        if s is None or not isinstance(dst, int):
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        ctypes.memmove(dst, s.tobytes(), n)
        return OK

    def cuMemsetD8(self, dst, value, n):
        d = self._span(int(dst), n)
        if d is None:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        d[:] = value & 0xFF
        return OK

    def cuMemsetD8Async(self, dst, value, n, stream):
        if self._span(int(dst), n) is None:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        if stream in self.capturing:  # a memset node: run at each replay
            self.capturing[stream].append(lambda: self.cuMemsetD8(dst, value, n))
            return OK
        self.memsets.append((int(dst), n, stream))
        return self.cuMemsetD8(dst, value, n)

    # -- streams and graphs: a capture records the stream's calls, a replay runs them ---
    def cuStreamCreate(self, flags):
        handle = 0x5000 + len(self.created_streams) + 1
        self.created_streams.append(handle)
        return CUresult.CUDA_SUCCESS, handle

    def cuStreamDestroy(self, stream):
        if stream not in self.created_streams or stream in self.destroyed_streams:
            return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
        self.destroyed_streams.append(stream)
        return OK

    def cuStreamBeginCapture(self, stream, mode):
        if not stream or stream in self.capturing:  # the NULL stream cannot be captured
            return (CUresult.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,)
        self.capturing[stream] = []
        return OK

    def cuStreamEndCapture(self, stream):
        if stream not in self.capturing:
            return CUresult.CUDA_ERROR_ILLEGAL_STATE, None
        nodes = self.capturing.pop(stream)
        self.graphs.append(nodes)
        return CUresult.CUDA_SUCCESS, ("graph", len(self.graphs) - 1)

    def cuGraphInstantiate(self, graph, flags):
        return CUresult.CUDA_SUCCESS, ("exec", graph[1])

    def cuGraphLaunch(self, exe, stream):
        if stream in self.capturing:
            raise NotImplementedError("a graph launched into a capture")
        self.replays += 1
        for node in self.graphs[exe[1]]:
            err = node()
            if err != OK:
                return err
        return OK

    def cuGraphExecDestroy(self, exe):
        self.destroyed_graphs.append(exe)
        return OK

    def cuGraphDestroy(self, graph):
        return OK

    def cuModuleLoadData(self, image):
        try:
            co = read_cubin(bytes(image))
        except ValueError:
            return CUresult.CUDA_ERROR_INVALID_IMAGE, None
        if co.target.split("--")[-1] != self.archs[self.current]:
            return CUresult.CUDA_ERROR_NO_BINARY_FOR_GPU, None
        return CUresult.CUDA_SUCCESS, _Module(co)

    def cuModuleGetFunction(self, module, name):
        if not module.loaded or name.decode() != module.co.symbol:
            return CUresult.CUDA_ERROR_NOT_FOUND, None
        return CUresult.CUDA_SUCCESS, _Function(module, module.co.symbol)

    def cuModuleUnload(self, module):
        if not module.loaded:
            return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
        module.loaded = False
        return OK

    def cuFuncSetAttribute(self, f, attrib, value):
        """Only the dynamic shared opt-in, bounded as on the H100/H200 (227 KB)."""
        if attrib != CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
            raise NotImplementedError(f"attribute {attrib}")
        if not 0 <= value <= _MAX_DYNAMIC_SHARED - f.module.co.static_lds_bytes:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        f.max_dynamic_shared = value
        return OK

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, kernelParams, extra):
        if not isinstance(kernelParams, int) or extra not in (0, None):
            raise NotImplementedError("the fake reads a void** kernelParams address only")
        co = f.module.co
        kd = _kernel_def(f.symbol)
        params = (ctypes.c_void_p * len(co.args)).from_address(kernelParams)
        need = sum(a.nbytes for a in kd.lds) if co.static_lds_bytes == 0 else 0
        # as the driver: a launch past the function's dynamic limit is refused; the fake
        # also refuses one that passes less than the kernel's extern array needs (the
        # real kernel would write past the CTA's shared memory: no error, wrong numbers)
        if (bx, by, bz) != (kd.block_size, 1, 1) or min(gx, gy, gz) < 1 or \
                shared > f.max_dynamic_shared or shared != need:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        if stream in self.capturing:  # a kernel node: its arguments copied now
            raw = [ctypes.create_string_buffer(ctypes.string_at(params[i], a.size), a.size)
                   for i, a in enumerate(co.args)]
            kept = (ctypes.c_void_p * max(1, len(raw)))(*[ctypes.addressof(b) for b in raw])

            def node(raw=raw, kept=kept):  # ``raw`` kept alive as long as the node
                return self.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream,
                                           ctypes.addressof(kept), 0)
            self.capturing[stream].append(node)
            return OK
        values, bound = {}, {}
        for i, (a, ka) in enumerate(zip(co.args, kd.args, strict=True)):
            v = int.from_bytes(ctypes.string_at(params[i], a.size), "little")
            values[ka.name] = v
            if ka.dtype.is_ptr:
                mem = self._from(v)
                if mem is None:
                    self.faults.append(f"{f.symbol}: {ka.name}=0x{v:x} is no allocation")
                    return (CUresult.CUDA_ERROR_LAUNCH_FAILED,)
                bound[ka.name] = mem
            else:
                bound[ka.name] = v
        self.launches.append(Launch(f.symbol, (gx, gy, gz), (bx, by, bz), values))
        self.streams.append(stream)
        self.clock_ms += self.launch_ms.get(f.symbol, 0.001 * gx * gy * gz)
        try:
            emulate(kd, (gx, gy, gz), bound)
        except EmulationError as e:
            self.faults.append(f"{f.symbol}: {e}")
            return (CUresult.CUDA_ERROR_LAUNCH_FAILED,)
        return OK

    def _from(self, addr: int):
        if addr == 0:
            return np.zeros(0, np.uint8)
        for base, mem in self.allocations.items():
            if base <= addr < base + mem.size:
                return mem[addr - base:]
        return None

