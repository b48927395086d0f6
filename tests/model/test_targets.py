"""The catalog's MFMA rows: what gfx942 and gfx950 admit, and the device sizes beside them."""

from __future__ import annotations

from wgradcache.kernel import mma
from wgradcache.model.devices import device_size
from wgradcache.model.targets import CODE_OBJECT_VERSION, get_target


def test_mfma_targets_are_wave64_with_their_widest_k_atom():
    g942, g950 = get_target("gfx942"), get_target("gfx950")
    assert (g942.family, g942.wave_size, g942.lds_bytes, g942.e_mach) == ("mfma", 64, 65536, 0x4C)
    assert (g950.family, g950.wave_size, g950.lds_bytes, g950.e_mach) == ("mfma", 64, 163840,
                                                                          0x4F)
    for dt in ("fp16", "bf16"):
        assert (g942.atom(dt).shape, g942.atom(dt).form) == ("16x16x16", "mfma")
        assert (g950.atom(dt).shape, g950.atom(dt).form) == ("16x16x32", "mfma_k32")
    for t in (g942, g950):
        lay = mma.layout(t.atom("fp16").form)
        assert (lay.wave_size, lay.m, lay.n, lay.k) == (64, 16, 16, t.atom("fp16").k)
        # native packed and f32 atomics, two-stage admitted; no async loop (the reason cited)
        assert t.packed_atomics_native and t.float_atomics_validated
        assert not t.async_lds_copy and "M0" in t.sources["async_lds_copy"]
    assert CODE_OBJECT_VERSION == 5


def test_mi300x_and_mi355x_sizes():
    assert (device_size("gfx942").cu_count, device_size("gfx942").xcd_count) == (304, 8)
    assert (device_size("gfx950").cu_count, device_size("gfx950").xcd_count) == (256, 8)
    assert get_target("gfx950").cu_count == 256
