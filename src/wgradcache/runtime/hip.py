"""Launching stored code objects on a real GPU through hip-python.

hip-python imports without ROCm but fails at its first call; every path here turns that
(and a missing package, or no device of the target's arch) into ``(None, reason)``, so
``verify --device auto`` says in one line that it fell back to the emulator and
``--device hip`` fails with the reason, never silently.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["HipDevice", "device_for", "launch"]


@dataclass(frozen=True)
class HipDevice:
    index: int
    arch: str


def _hip():
    from hip import hip  # type: ignore[import-not-found]

    return hip


def _check(result):
    """hip-python returns (err, value...) tuples; raise on an error code."""
    hip = _hip()
    if isinstance(result, tuple):
        err, *rest = result
    else:
        err, rest = result, []
    if err != hip.hipError_t.hipSuccess:
        raise RuntimeError(f"HIP error {err}")
    return rest[0] if len(rest) == 1 else rest


def device_for(target: str) -> tuple[HipDevice | None, str]:
    """The first device whose gcnArchName is ``target``, or None and why not."""
    try:
        hip = _hip()
    except Exception as e:  # not installed, or the import itself needs ROCm
        return None, f"hip-python unavailable ({type(e).__name__}: {e}); pip install " \
                     "'wgradcache[hip]' on a ROCm machine"
    try:
        n = _check(hip.hipGetDeviceCount())
        for i in range(n):
            props = hip.hipDeviceProp_t()
            _check(hip.hipGetDeviceProperties(props, i))
            arch = props.gcnArchName.decode().split(":")[0]
            if arch == target:
                return HipDevice(i, arch), ""
        return None, f"{n} HIP device(s), none is {target}"
    except Exception as e:  # no ROCm runtime: the first call fails
        return None, f"HIP runtime unavailable ({type(e).__name__}: {e})"


def launch(device: HipDevice, hsaco: bytes, symbol: str, kernargs: bytes,
           grid: tuple[int, int, int], block: int, buffers: dict) -> None:
    """Load the code object and launch once (buffers: name -> device pointer, prepared by
    the caller from the ABI). Untested here: this machine has no GPU."""
    hip = _hip()
    _check(hip.hipSetDevice(device.index))
    module = _check(hip.hipModuleLoadData(hsaco))
    func = _check(hip.hipModuleGetFunction(module, symbol.encode()))
    # HIP_LAUNCH_PARAM_BUFFER_POINTER (1), _BUFFER_SIZE (2), _END (3)
    extra = (1, kernargs, 2, len(kernargs), 3)
    _check(hip.hipModuleLaunchKernel(func, *grid, block, 1, 1, 0, None, None, extra))
    _check(hip.hipDeviceSynchronize())
    _check(hip.hipModuleUnload(module))
