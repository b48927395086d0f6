"""Device sizes per target: compute units and XCDs, what ranking a launch's waves needs, and
which split-K degree rule the target's launches follow (``wgrad/split_k.py``).

Apart from the target catalog (``targets.py``) because no emitted kernel depends on them:
the catalog is in the generator digest, so correcting a CU count there re-emitted every job
of the cache. ``Target.cu_count`` / ``Target.xcd_count`` read this table (imported on first
use, so emission never loads it; ``tests/build/test_generator_digest.py`` checks).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DeviceSize", "DEVICE_SIZES", "SPLIT_RULES", "CuLimits", "device_size"]

# The automatic split degree's rule (wgrad/split_k.py): "fill" the GPU to a CTA count
# (upstream's, fitted on a gfx1250 degree sweep), or the fewest "waves" of resident CTAs.
SPLIT_RULES = ("fill", "waves")


@dataclass(frozen=True)
class CuLimits:
    """What one CU / SM holds at once, which bounds how many CTAs of a kernel it runs
    together (its residency, from the code object's registers and shared memory)."""

    registers: int  # 32-bit registers
    register_unit: int  # registers are given to a warp in units of this many
    shared_bytes: int  # shared memory a CU can give its CTAs
    shared_per_cta: int  # shared memory the system keeps per resident CTA
    threads: int
    ctas: int
    source: str


@dataclass(frozen=True)
class DeviceSize:
    cu_count: int
    xcd_count: int
    source: str
    split: str = "fill"  # one of SPLIT_RULES
    cu_limits: CuLimits | None = None  # what residency needs (the "waves" rule)


DEVICE_SIZES: dict[str, DeviceSize] = {
    # No public CU count for gfx1250; rocKE's split-K table defaults unknown targets to
    # 256 CUs / 1 XCD (rocke-aot-wgrad-facts.md §3).
    "gfx1250": DeviceSize(256, 1, "no source: rocKE default 256 / 1"),
    # RX 9070 XT: 64 CUs (AMD product page); not in rocKE's table. No probe can tell.
    "gfx1201": DeviceSize(64, 1, "no source in reference/: RX 9070 XT product figure"),
    "gfx1151": DeviceSize(40, 1, "rocKE split-K table lists 64 (facts §3); Strix Halo has 40. "
                                 "We use 40, unsourced in reference/"),
    # MI355X: 8 XCDs of 32 active CUs (AMD at ISSCC 2026, reported by news.lavx.hu
    # "ISSCC 2026: AMD's MI355X doubles throughput with fewer compute units": "32 compute
    # units versus 38 in MI300X"; eight CDNA 4 compute dies: boston-uk blog 2025-08-14).
    "gfx950": DeviceSize(256, 8, "rocKE split-K table (facts §3); MI355X 8 XCD x 32 CU "
                                 "(ISSCC 2026 report)"),
    # MI300X: 8 XCDs of 38 CUs = 304 (yobitel.com/knowledge-base/amd-mi300x: "Eight XCD
    # compute dies (304 Compute Units total)"; the same ISSCC report: 38 per XCD).
    "gfx942": DeviceSize(304, 8, "rocKE split-K table (facts §3); MI300X 8 XCD x 38 CU "
                                 "(public spec pages)"),
    # H200 SXM: 132 SMs (cudaGetDeviceProperties as PyTorch read it on the device machine,
    # .library/device/KINDS.md; the H100 SXM datasheet's 132 too). "XCDs": one die.
    # The split rule: a degree sweep on an H100 (12-07, benchmarks/README.md "Split degree")
    # put the fill rule's degree 1.09x behind the best in geometric mean (1.44x at worst),
    # the waves rule 1.04x (1.17x); the SM limits are compute capability 9.0's (CUDA C++
    # Programming Guide, "Compute Capabilities" table: 64 K registers, 228 KB shared memory
    # of which 1 KB is kept per block, 2048 threads, 32 blocks; registers given per warp in
    # units of 256).
    "sm_90": DeviceSize(132, 1, "H200: 132 multiprocessors (device properties)",
                        split="waves",
                        cu_limits=CuLimits(65536, 256, 233472, 1024, 2048, 32,
                                           "CUDA C++ Programming Guide, compute capability "
                                           "9.0")),
}


def device_size(target: str) -> DeviceSize:
    try:
        return DEVICE_SIZES[target]
    except KeyError:
        raise KeyError(f"no device size for {target!r}; known: {', '.join(DEVICE_SIZES)}"
                       ) from None
