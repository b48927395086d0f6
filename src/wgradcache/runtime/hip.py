"""Launching stored code objects on a real GPU through hip-python.

hip-python imports without ROCm but fails at its first call; ``device_for`` turns that
(and a missing package, or no device of the target's arch) into ``(None, reason)``, so
``verify --device auto`` says in one line that it fell back to the emulator and
``--device hip`` fails with the reason, never silently.

``HipSession`` is the thin layer over the few hip-python calls a launch needs (hipMalloc,
hipMemcpy, hipMemset, hipFree, hipModuleLoadData, hipModuleGetFunction,
hipModuleLaunchKernel, hipDeviceSynchronize, hipModuleUnload). hip-python returns a tuple
whose first element is a ``hipError_t``; every call goes through ``_check``, which raises
``HipError`` naming the call and the error.

Kernel arguments go through ``extra`` as the HIP C API defines it: a ``void*[5]`` of
{HIP_LAUNCH_PARAM_BUFFER_POINTER, args, HIP_LAUNCH_PARAM_BUFFER_SIZE, &size,
HIP_LAUNCH_PARAM_END}, built here with ctypes. hip-python passes a ctypes array through
unchanged (its buffer address; checked in tests/runtime against the installed binding);
its list-of-values convenience is not used, because it re-derives the alignment itself and
the layout must be the one ``runtime/abi.py`` packs. The runtime (ROCclr) reads each
explicit argument at the offset the code object's metadata gives and fills the hidden
arguments itself, so only the explicit segment is passed.

Tested only against the host-memory fake in tests/runtime (which decodes the kernarg bytes
by the code object's metadata and runs the emulator): this path has never run on a GPU.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

import numpy as np

from wgradcache.runtime import LaunchDims

__all__ = ["HipDevice", "HipError", "HipKernel", "HipSession", "device_for"]


@dataclass(frozen=True)
class HipDevice:
    index: int
    arch: str

    def describe(self) -> str:
        return f"{self.arch} device {self.index}"


class HipError(RuntimeError):
    """A HIP call returned an error code (``call`` and the code's name in the message)."""

    def __init__(self, call: str, err):
        name = getattr(err, "name", None) or str(err)
        try:
            code = f" ({int(err)})"
        except (TypeError, ValueError):
            code = ""
        super().__init__(f"{call}: {name}{code}")
        self.call, self.err = call, err


def _hip():
    """hip-python's ``hip`` module (tests replace ``sys.modules['hip']`` with a fake)."""
    from hip import hip  # type: ignore[import-not-found]

    return hip


def _check(result, call: str = "HIP call"):
    """hip-python returns (err, value...) tuples; raise HipError on an error code and return
    the value (None for none, a list for several)."""
    hip = _hip()
    if isinstance(result, tuple):
        err, *rest = result
    else:
        err, rest = result, []
    if err != hip.hipError_t.hipSuccess:
        raise HipError(call, err)
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


def device_for(target: str) -> tuple[HipDevice | None, str]:
    """The first device whose gcnArchName is ``target``, or None and why not."""
    try:
        hip = _hip()
    except Exception as e:  # not installed, or the import itself needs ROCm
        return None, f"hip-python unavailable ({type(e).__name__}: {e}); pip install " \
                     "'wgradcache[hip]' on a ROCm machine"
    try:
        err, n = hip.hipGetDeviceCount()
        if err == hip.hipError_t.hipErrorNoDevice:
            n = 0
        elif err != hip.hipError_t.hipSuccess:
            raise HipError("hipGetDeviceCount", err)
        for i in range(n):
            props = _check(hip.hipGetDeviceProperties(i), "hipGetDeviceProperties")
            name = props.gcnArchName  # str in hip-python >= 7, bytes before
            if isinstance(name, bytes):
                name = name.decode(errors="replace")
            arch = name.split(":")[0]  # "gfx1250:sramecc+:xnack-" -> "gfx1250"
            if arch == target:
                return HipDevice(i, arch), ""
        return None, f"{n} HIP device(s), none is {target}"
    except Exception as e:  # no ROCm runtime: the first call fails
        return None, f"HIP runtime unavailable ({type(e).__name__}: {e})"


@dataclass
class HipKernel:
    """A loaded kernel: the module (kept for unload), the function handle, its symbol."""

    symbol: str
    module: object
    function: object
    image: bytes = field(repr=False)  # kept alive while the module is loaded


class HipSession:
    """One device's allocations and modules for the span of a ``with`` block; everything
    is freed / unloaded on exit, also when a launch failed.

    Addresses are plain ints (what the kernarg segment holds); the hip-python handles
    behind them are kept here and passed back to the calls that free them.
    """

    def __init__(self, device: HipDevice):
        self.device = device
        self.hip = _hip()
        self._buffers: dict[int, object] = {}
        self._kernels: list[HipKernel] = []
        self._pending: list[tuple] = []  # kernarg buffers of launches not yet synchronized

    def __enter__(self) -> HipSession:
        _check(self.hip.hipSetDevice(self.device.index), "hipSetDevice")
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.close()
        except HipError:
            if exc_type is None:
                raise
            # a failed launch leaves a sticky error the clean-up calls repeat: keep the first

    def close(self) -> None:
        """Synchronize, then free every buffer and unload every module; the first error is
        raised after all were attempted."""
        errors: list[HipError] = []

        def attempt(result, call):
            try:
                _check(result, call)
            except HipError as e:
                errors.append(e)

        attempt(self.hip.hipDeviceSynchronize(), "hipDeviceSynchronize")
        self._pending.clear()
        for handle in self._buffers.values():
            attempt(self.hip.hipFree(handle), "hipFree")
        self._buffers.clear()
        for k in self._kernels:
            attempt(self.hip.hipModuleUnload(k.module), "hipModuleUnload")
        self._kernels.clear()
        if errors:
            raise errors[0]

    # -- memory ----------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        """Device address of ``nbytes`` new bytes (0, no allocation, for 0 bytes). The
        contents are undefined, as hipMalloc's are."""
        if nbytes == 0:
            return 0
        handle = _check(self.hip.hipMalloc(nbytes), "hipMalloc")
        addr = int(handle)
        self._buffers[addr] = handle
        return addr

    def _handle(self, addr: int):
        if addr not in self._buffers:
            raise ValueError(f"0x{addr:x} is not a buffer of this session")
        return self._buffers[addr]

    def upload(self, addr: int, host: np.ndarray) -> None:
        host = np.ascontiguousarray(host)
        _check(self.hip.hipMemcpy(self._handle(addr), host, host.nbytes,
                                  self.hip.hipMemcpyKind.hipMemcpyHostToDevice), "hipMemcpy")

    def download(self, addr: int, out: np.ndarray) -> None:
        """Fill the C-contiguous ``out`` with its size in bytes from ``addr``."""
        if not out.flags.c_contiguous:
            raise ValueError("download target must be C-contiguous")
        _check(self.hip.hipMemcpy(out, self._handle(addr), out.nbytes,
                                  self.hip.hipMemcpyKind.hipMemcpyDeviceToHost), "hipMemcpy")

    def memset(self, addr: int, value: int, nbytes: int) -> None:
        _check(self.hip.hipMemset(self._handle(addr), value, nbytes), "hipMemset")

    # -- kernels ---------------------------------------------------------------------------
    def load_kernel(self, hsaco: bytes, symbol: str) -> HipKernel:
        """Load a code object (the stored bytes, unchanged) and look up ``symbol``."""
        image = bytes(hsaco)
        module = _check(self.hip.hipModuleLoadData(image), "hipModuleLoadData")
        try:
            function = _check(self.hip.hipModuleGetFunction(module, symbol.encode()),
                              f"hipModuleGetFunction({symbol})")
        except HipError:
            self.hip.hipModuleUnload(module)
            raise
        k = HipKernel(symbol, module, function, image)
        self._kernels.append(k)
        return k

    def launch(self, kernel: HipKernel, dims: LaunchDims, kernargs: bytes,
               offsets: tuple[int, ...] = ()) -> None:
        """Enqueue one launch on the default stream (in order with the previous ones).

        ``kernargs`` is the explicit segment as ``abi.pack`` lays it out; ``offsets`` (each
        argument's place in it) is for CUDA's per-parameter pointers: HIP takes the whole
        segment. ``dims.shared``: dynamic LDS bytes (0 on every AMD target: their LDS is
        static, ``Target.lds_dynamic``)."""
        grid, block, shared = dims.grid, dims.block, dims.shared
        hip = self.hip
        buf = ctypes.create_string_buffer(bytes(kernargs), len(kernargs))
        size = ctypes.c_size_t(len(kernargs))
        extra = (ctypes.c_void_p * 5)(
            hip.HIP_LAUNCH_PARAM_BUFFER_POINTER, ctypes.addressof(buf),
            hip.HIP_LAUNCH_PARAM_BUFFER_SIZE, ctypes.addressof(size),
            hip.HIP_LAUNCH_PARAM_END)
        gx, gy, gz = (int(g) for g in grid)
        self._pending.append((buf, size, extra))
        _check(hip.hipModuleLaunchKernel(kernel.function, gx, gy, gz, int(block), 1, 1,
                                         int(shared), None, None, extra),
               f"hipModuleLaunchKernel({kernel.symbol})")

    def synchronize(self) -> None:
        _check(self.hip.hipDeviceSynchronize(), "hipDeviceSynchronize")
        self._pending.clear()
