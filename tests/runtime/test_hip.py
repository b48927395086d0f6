"""runtime/hip.py: device discovery, the real hip-python's API as the fake mirrors it, and
the session's memory and error handling against the fake."""

from __future__ import annotations

import ctypes
import inspect
import sys

import numpy as np
import pytest
from fake_hip import FakeHip

from wgradcache.cache.store import TargetCache
from wgradcache.runtime.hip import HipDevice, HipError, HipSession, device_for

FAKE_CALLS = ("hipGetDeviceCount", "hipGetDeviceProperties", "hipSetDevice",
              "hipDeviceSynchronize", "hipMalloc", "hipFree", "hipMemcpy", "hipMemset",
              "hipModuleLoadData", "hipModuleGetFunction", "hipModuleUnload",
              "hipModuleLaunchKernel")


def _real_hip():
    from hip import hip

    return hip


def test_device_for_without_rocm_is_none_with_the_reason():
    """The real hip-python on this ROCm-less machine: it imports, its first call cannot
    dlopen libamdhip64."""
    dev, why = device_for("gfx1250")
    assert dev is None
    assert why.startswith("HIP runtime unavailable (RuntimeError: failed to dlopen")
    assert "libamdhip64.so" in why


def test_device_for_picks_the_device_of_the_arch(monkeypatch):
    fake = FakeHip(archs=("gfx1201", "gfx1250"))
    monkeypatch.setitem(sys.modules, "hip", fake.as_package())
    assert device_for("gfx1250") == (HipDevice(1, "gfx1250"), "")
    assert device_for("gfx1151") == (None, "2 HIP device(s), none is gfx1151")
    monkeypatch.setitem(sys.modules, "hip", FakeHip(archs=()).as_package())
    assert device_for("gfx1250") == (None, "0 HIP device(s), none is gfx1250")


def test_the_fake_has_the_installed_hip_python_api():
    """Every call the fake implements exists in hip-python with the same parameters, and
    the constants and error codes it uses have hip-python's values."""
    real = _real_hip()
    fake = FakeHip()
    for name in FAKE_CALLS:
        want = list(inspect.signature(getattr(real, name)).parameters)
        assert list(inspect.signature(getattr(fake, name)).parameters) == want, name
    for enum in ("hipError_t", "hipMemcpyKind"):
        for member in getattr(fake, enum):
            assert int(getattr(getattr(real, enum), member.name)) == int(member), member
    for const in ("HIP_LAUNCH_PARAM_BUFFER_POINTER", "HIP_LAUNCH_PARAM_BUFFER_SIZE",
                  "HIP_LAUNCH_PARAM_END"):
        assert getattr(real, const) == getattr(fake, const)


def test_hip_python_hands_our_extra_array_to_the_runtime_unchanged():
    """hipModuleLaunchKernel converts ``extra`` with HipModuleLaunchKernel_extra: a ctypes
    void*[5] must come through as its own address (not re-packed as an argument list)."""
    from rocm.bindings._hip_helpers import HipModuleLaunchKernel_extra

    buf = ctypes.create_string_buffer(b"\x01\x02\x03\x04", 4)
    size = ctypes.c_size_t(4)
    extra = (ctypes.c_void_p * 5)(1, ctypes.addressof(buf), 2, ctypes.addressof(size), 3)
    assert int(HipModuleLaunchKernel_extra.fromObj(extra)) == ctypes.addressof(extra)


def test_hip_python_takes_our_host_arrays_and_images_by_their_data_address():
    """hipMemcpy's host side (fp16 / bf16-as-uint16 / fp32 arrays) and hipModuleLoadData's
    image go through hip-python's Pointer: the address must be the data's own."""
    from rocm.bindings.util.types import Pointer

    for a in (np.zeros(7, np.float16), np.zeros(7, np.uint16), np.zeros((3, 5), np.float32)):
        assert int(Pointer.fromObj(a)) == a.ctypes.data
    image = bytes(range(16))
    assert ctypes.string_at(int(Pointer.fromObj(image)), 16) == image


def test_session_memory_round_trip_and_release(fake_hip):
    dev, _ = device_for("gfx1250")
    data = np.arange(-8, 8, dtype=np.float16)
    with HipSession(dev) as s:
        a, b = s.alloc(data.nbytes), s.alloc(64)
        assert s.alloc(0) == 0
        assert a != b and len(fake_hip.allocations) == 2
        s.upload(a, data)
        back = np.empty_like(data)
        s.download(a, back)
        assert back.tobytes() == data.tobytes()
        s.memset(b, 0, 64)
        out = np.full(16, 7, np.uint32)
        s.download(b, out)
        assert not out.any()
        with pytest.raises(ValueError, match="not a buffer of this session"):
            s.download(a + 4, back)
    assert fake_hip.allocations == {}


def test_loading_a_code_object_for_another_arch_is_a_hip_error(monkeypatch, small_cache):
    fake = FakeHip(archs=("gfx1201",))
    monkeypatch.setitem(sys.modules, "hip", fake.as_package())
    cache = TargetCache(small_cache["cache"], "gfx1250")
    _, entry = next(iter(cache.iter_entries()))
    with HipSession(HipDevice(0, "gfx1201")) as s, pytest.raises(HipError) as e:
        s.load_kernel(cache.read_blob(entry.blob), entry.symbol)
    assert str(e.value) == "hipModuleLoadData: hipErrorNoBinaryForGpu (209)"
