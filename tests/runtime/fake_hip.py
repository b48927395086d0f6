"""A host-memory stand-in for hip-python's ``hip.hip``: the calls ``runtime/hip.py`` makes.

A test double for the GPU, not for the launcher: ``runtime/launch.py`` runs unchanged
against it. What it does is what the HIP runtime (ROCclr) does with those calls, as far as
the launcher can tell:

* device memory is host memory at fake addresses; hipMalloc returns it filled with 0xFF
  (NaN in every float type) so a launch that forgets to zero dW or the workspace fails;
* hipModuleLoadData parses the image (``read_code_object``) and refuses one built for
  another arch; hipModuleGetFunction finds only the code object's own symbol;
* hipModuleLaunchKernel decodes ``extra`` as ROCclr does (a ``void*[5]`` of
  {BUFFER_POINTER, args, BUFFER_SIZE, &size, END}), reads every explicit argument at the
  offset the code object's metadata gives (pointers resolved to the fake allocations), and
  runs the emulator on the KernelDef rebuilt from the symbol (the spec label, or the
  stage-2 name), on the launch's grid. Launches run at once, in order (one stream).

Every call's name and parameters match the installed hip-python (tests/runtime checks it).
"""

from __future__ import annotations

import ctypes
import re
import types
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from wgradcache.compile.codeobject import read_code_object
from wgradcache.kernel.emulate import EmulationError, emulate
from wgradcache.model.spec import from_label
from wgradcache.pipeline.emulate import cached_kernel
from wgradcache.wgrad.kernel import kernel_symbol
from wgradcache.wgrad.stage2 import build_stage2


class hipError_t(IntEnum):  # noqa: N801 - hip-python's names
    hipSuccess = 0
    hipErrorInvalidValue = 1
    hipErrorNotInitialized = 3
    hipErrorInvalidConfiguration = 9
    hipErrorInvalidDevicePointer = 17
    hipErrorNoDevice = 100
    hipErrorInvalidDevice = 101
    hipErrorInvalidImage = 200
    hipErrorNoBinaryForGpu = 209
    hipErrorInvalidResourceHandle = 400
    hipErrorNotFound = 500
    hipErrorLaunchFailure = 719


class hipMemcpyKind(IntEnum):  # noqa: N801
    hipMemcpyHostToHost = 0
    hipMemcpyHostToDevice = 1
    hipMemcpyDeviceToHost = 2
    hipMemcpyDeviceToDevice = 3
    hipMemcpyDefault = 4


HIP_LAUNCH_PARAM_BUFFER_POINTER = 1
HIP_LAUNCH_PARAM_BUFFER_SIZE = 2
HIP_LAUNCH_PARAM_END = 3

OK = (hipError_t.hipSuccess,)
_BASE = 0x7F00_0000_0000
_ALIGN = 4096


class DevicePtr:
    """What hipMalloc hands out (hip-python: a DeviceArray; int() is the address)."""

    def __init__(self, addr: int):
        self.addr = addr

    def __int__(self) -> int:
        return self.addr


@dataclass
class _Props:
    gcnArchName: str  # noqa: N815


@dataclass
class _Module:
    co: object
    target: str
    loaded: bool = True


@dataclass
class _Function:
    module: _Module
    symbol: str


@dataclass
class Launch:
    """One launch as the fake decoded it."""

    symbol: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    values: dict  # explicit argument name -> int (pointers as addresses)


@dataclass
class FakeHip:
    """The fake module's state and calls (an instance stands in for ``hip.hip``)."""

    archs: tuple[str, ...] = ("gfx1250",)
    allocations: dict = field(default_factory=dict)  # base address -> uint8 array
    events: list = field(default_factory=list)  # (call, detail...) in call order
    launches: list = field(default_factory=list)
    faults: list = field(default_factory=list)  # emulator errors of failed launches
    current: int = 0
    _next: int = _BASE

    hipError_t = hipError_t
    hipMemcpyKind = hipMemcpyKind
    HIP_LAUNCH_PARAM_BUFFER_POINTER = HIP_LAUNCH_PARAM_BUFFER_POINTER
    HIP_LAUNCH_PARAM_BUFFER_SIZE = HIP_LAUNCH_PARAM_BUFFER_SIZE
    HIP_LAUNCH_PARAM_END = HIP_LAUNCH_PARAM_END

    def as_package(self) -> types.ModuleType:
        """A module named ``hip`` whose ``hip`` attribute is this fake (``from hip import
        hip`` then yields it)."""
        pkg = types.ModuleType("hip")
        pkg.hip = self
        return pkg

    # -- devices -----------------------------------------------------------------------------
    def hipGetDeviceCount(self):
        if not self.archs:
            return hipError_t.hipErrorNoDevice, 0
        return hipError_t.hipSuccess, len(self.archs)

    def hipGetDeviceProperties(self, deviceId):
        if not 0 <= deviceId < len(self.archs):
            return hipError_t.hipErrorInvalidDevice, None
        return hipError_t.hipSuccess, _Props(f"{self.archs[deviceId]}:sramecc+:xnack-")

    def hipSetDevice(self, deviceId):
        if not 0 <= deviceId < len(self.archs):
            return (hipError_t.hipErrorInvalidDevice,)
        self.current = deviceId
        return OK

    def hipDeviceSynchronize(self):
        return OK

    # -- memory ------------------------------------------------------------------------------
    def hipMalloc(self, size):
        if size == 0:
            return hipError_t.hipSuccess, None
        addr = self._next
        self._next += -(-size // _ALIGN) * _ALIGN + _ALIGN
        self.allocations[addr] = np.full(size, 0xFF, np.uint8)
        self.events.append(("hipMalloc", addr, size))
        return hipError_t.hipSuccess, DevicePtr(addr)

    def hipFree(self, ptr):
        addr = int(ptr) if ptr is not None else 0
        if addr not in self.allocations:
            return (hipError_t.hipErrorInvalidDevicePointer,)
        del self.allocations[addr]
        self.events.append(("hipFree", addr))
        return OK

    def resolve(self, ptr, nbytes: int) -> np.ndarray | None:
        """The bytes [ptr, ptr + nbytes) of one allocation, or None when they are not."""
        addr = int(ptr)
        for base, mem in self.allocations.items():
            if base <= addr and addr + nbytes <= base + mem.size:
                return mem[addr - base: addr - base + nbytes]
        return None

    def hipMemcpy(self, dst, src, sizeBytes, kind):
        if not isinstance(kind, hipMemcpyKind):
            raise TypeError("argument 'kind' must be of type '_hipMemcpyKind__Base'")
        if kind == hipMemcpyKind.hipMemcpyHostToDevice:
            d = self.resolve(dst, sizeBytes)
            s = memoryview(src).cast("B")
            if d is None or s.nbytes < sizeBytes:
                return (hipError_t.hipErrorInvalidValue,)
            d[:] = np.frombuffer(s, np.uint8, sizeBytes)
            self.events.append(("hipMemcpyHtoD", int(dst), sizeBytes))
            return OK
        if kind == hipMemcpyKind.hipMemcpyDeviceToHost:
            s = self.resolve(src, sizeBytes)
            d = memoryview(dst).cast("B")
            if s is None or d.nbytes < sizeBytes or d.readonly:
                return (hipError_t.hipErrorInvalidValue,)
            d[:sizeBytes] = s.tobytes()
            self.events.append(("hipMemcpyDtoH", int(src), sizeBytes))
            return OK
        return (hipError_t.hipErrorInvalidValue,)  # the launcher copies H<->D only

    def hipMemset(self, dst, value, sizeBytes):
        d = self.resolve(dst, sizeBytes)
        if d is None:
            return (hipError_t.hipErrorInvalidValue,)
        d[:] = value & 0xFF
        self.events.append(("hipMemset", int(dst), value, sizeBytes))
        return OK

    # -- modules -----------------------------------------------------------------------------
    def hipModuleLoadData(self, image):
        try:
            co = read_code_object(bytes(memoryview(image)))
        except ValueError:
            return hipError_t.hipErrorInvalidImage, None
        target = co.target.split("--")[-1].split(":")[0]  # amdgcn-amd-amdhsa--gfx1250
        if target != self.archs[self.current]:
            return hipError_t.hipErrorNoBinaryForGpu, None
        self.events.append(("hipModuleLoadData", co.symbol))
        return hipError_t.hipSuccess, _Module(co, target)

    def hipModuleGetFunction(self, module, kname):
        if not isinstance(module, _Module) or not module.loaded:
            return hipError_t.hipErrorInvalidResourceHandle, None
        name = kname.decode() if isinstance(kname, bytes) else str(kname)
        if name != module.co.symbol:
            return hipError_t.hipErrorNotFound, None
        return hipError_t.hipSuccess, _Function(module, name)

    def hipModuleUnload(self, module):
        if not isinstance(module, _Module) or not module.loaded:
            return (hipError_t.hipErrorInvalidResourceHandle,)
        module.loaded = False
        return OK

    def hipModuleLaunchKernel(self, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
                              blockDimZ, sharedMemBytes, stream, kernelParams, extra):
        if not isinstance(f, _Function) or not f.module.loaded:
            return (hipError_t.hipErrorInvalidResourceHandle,)
        if kernelParams is not None or extra is None:
            raise NotImplementedError("the fake decodes 'extra' launches only")
        cfg = (ctypes.c_void_p * 5).from_address(_address(extra))
        if (cfg[0], cfg[2], cfg[4]) != (HIP_LAUNCH_PARAM_BUFFER_POINTER,
                                        HIP_LAUNCH_PARAM_BUFFER_SIZE, HIP_LAUNCH_PARAM_END):
            return (hipError_t.hipErrorNotInitialized,)  # what ROCclr returns
        size = ctypes.c_size_t.from_address(cfg[3]).value
        raw = ctypes.string_at(cfg[1], size) if size else b""
        kd = _kernel_def(f.symbol, f.module.target)
        explicit = f.module.co.explicit_args
        if [a.name for a in kd.args] != [a.name for a in explicit]:
            raise AssertionError(f"{f.symbol}: the rebuilt kernel's arguments are not the "
                                 "code object's")
        grid = (gridDimX, gridDimY, gridDimZ)
        block = (blockDimX, blockDimY, blockDimZ)
        if block != (kd.block_size, 1, 1) or min(grid) < 1 or sharedMemBytes != 0:
            return (hipError_t.hipErrorInvalidConfiguration,)
        values, bound = {}, {}
        for a, ka in zip(explicit, kd.args, strict=True):
            if a.offset + a.size > len(raw):
                return (hipError_t.hipErrorInvalidValue,)
            v = int.from_bytes(raw[a.offset:a.offset + a.size], "little")
            values[a.name] = v
            if ka.dtype.is_ptr:
                mem = self._from(v)
                if mem is None:  # a wild pointer: the GPU would fault
                    self.faults.append(f"{f.symbol}: {a.name}=0x{v:x} is no allocation")
                    return (hipError_t.hipErrorLaunchFailure,)
                bound[a.name] = mem
            else:
                bound[a.name] = v
        self.launches.append(Launch(f.symbol, grid, block, values))
        self.events.append(("hipModuleLaunchKernel", f.symbol, grid))
        try:
            emulate(kd, grid, bound)
        except EmulationError as e:
            self.faults.append(f"{f.symbol}: {e}")
            return (hipError_t.hipErrorLaunchFailure,)
        return OK

    def _from(self, addr: int) -> np.ndarray | None:
        """From ``addr`` to the end of its allocation (null: zero bytes, any access fails)."""
        if addr == 0:
            return np.zeros(0, np.uint8)
        for base, mem in self.allocations.items():
            if base <= addr < base + mem.size:
                return mem[addr - base:]
        return None


def _address(obj) -> int:
    if isinstance(obj, ctypes.Array | ctypes.Structure):
        return ctypes.addressof(obj)
    return int(obj)


_STAGE2 = re.compile(r"^wgrad_stage2_(?P<dw>[a-z0-9]+)_wsr(?P<r>\d+)$")


def _kernel_def(symbol: str, target: str):
    m = _STAGE2.match(symbol)
    if m:
        return build_stage2(target, m["dw"], int(m["r"]))
    if not symbol.startswith("wgrad_"):
        raise AssertionError(f"not a wgrad symbol: {symbol}")
    label = symbol[len("wgrad_"):].replace("_", "-").replace("two-stage", "two_stage")
    spec = from_label(label)
    if kernel_symbol(spec) != symbol:
        raise AssertionError(f"{symbol} does not round-trip through the label {label}")
    return cached_kernel(spec)
