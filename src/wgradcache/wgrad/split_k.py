"""Split-K policy (host side): which degree, slice width, reduction and grid a launch uses.

The degree is a kernel argument, so this policy runs per launch and never changes a binary.

* Automatic, capped per reduction by its rounding bound (a packed 16-bit atomic rounds the
  running dW sum after every add, so its degree is capped by ``atomic_rounding_degree_cap``:
  97 for fp16, 12 for bf16; float atomics, fp32 dW or the two-stage f32 workspace, use
  ``MAX_DEGREE``, 128), by K slices no shorter than ``MIN_SLICE_K`` and by the K tiles; then
  the target's rule (``model.devices``, ``DeviceSize.split``):

  - "fill": fill the GPU to ``FILL_CTAS`` CTAs (``FILL_CTAS_GROUPED`` when grouped).
    Upstream fitted the fill and slice terms on a degree sweep of gfx1250 split-K binaries
    (PR #14832); the AMD targets keep it (no sweep of ours on them).
  - "waves": the degree of the fewest K-tile steps per CU, ``wave_degree``: CTAs go out in
    rounds of (CUs x the kernel's resident CTAs), each round as long as one slice. Why: on
    an H100 (12-07, every ResNet-50 layer's best split-K kernel at degrees 1 to 128) two
    co-resident 236-register CTAs ran barely faster than one, so 144 CTAs (12 SMs with two)
    ran 1.2x slower than 108 and 252 (two on each SM) 1.2x faster; the fill rule's 1024 CTAs
    were 1.09x behind the best degree in geometric mean, 1.44x at worst, this rule 1.04x and
    1.17x. The residency is the code object's (``Backend.resident_ctas``: a select over the
    cache passes it); without it, ``RESIDENT_CTAS``.
* XCD snap (targets of several XCDs, ``model.devices``: MI300X / MI355X have 8): CTAs go
  to the XCDs round-robin, so the automatic degree becomes a multiple of
  step = xcds / gcd(base grid, xcds) (rounded down; up to one step when below it), which
  spreads every (tile, slice) column evenly over the XCDs' L2s; upstream's rule (rocKE
  ``select_split_k_wgrad``, rocke-aot-wgrad-facts.md §4). Kept only within every cap;
  a one-XCD target (gfx1250, gfx1201, gfx1151) has step 1.
* Override (the resolver's override of the automatic degree): kept, but held to
  ``MAX_DEGREE`` on the packed atomic; when a free reduction is allowed it moves to the
  two-stage workspace above that instead.
* Explicit: kept as given; only gridDim.z = groups · degree ≤ 65535 bounds it (a ValueError
  beyond). Slices past the end of K are empty: those CTAs add zeros.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from wgradcache.model.devices import device_size
from wgradcache.model.problem import ConvProblem
from wgradcache.model.spec import DEFAULT_WS_REPLICAS, KernelSpec, is_depthwise, is_direct
from wgradcache.wgrad.capability import MAX_GRID_Z

__all__ = [
    "ATOMIC_TOLERANCE", "MAX_DEGREE", "FILL_CTAS", "FILL_CTAS_GROUPED", "MIN_SLICE_K",
    "FRACTION_BITS", "atomic_rounding_degree_cap", "degree_cap", "slice_width",
    "SplitPlan", "plan_split_k", "xcd_snap", "wave_degree", "RESIDENT_CTAS",
]

ATOMIC_TOLERANCE = 5e-2  # upstream's verification tolerance the cap is derived from
MAX_DEGREE = 128  # top of upstream's degree ladder; the f32 and override cap
FILL_CTAS = 1024
FILL_CTAS_GROUPED = 2048
MIN_SLICE_K = 512
RESIDENT_CTAS = 2  # CTAs a CU runs at once where the code object does not say (the model's)
FRACTION_BITS = {"fp16": 10, "bf16": 7}


def atomic_rounding_degree_cap(fraction_bits: int, tol: float = ATOMIC_TOLERANCE) -> int:
    """floor(tol·(1−tol)·2^(bits+1)): the deepest packed-atomic split whose worst case (one
    1.0 partial, then partials of half an ulp that each round away) stays within ``tol``."""
    return math.floor(tol * (1 - tol) * 2 ** (fraction_bits + 1))


def degree_cap(dw_dtype: str, reduction: str) -> int:
    """The automatic degree's cap for a reduction into ``dw_dtype``."""
    if reduction == "none":
        return 1
    if reduction == "atomic" and dw_dtype in FRACTION_BITS:
        return atomic_rounding_degree_cap(FRACTION_BITS[dw_dtype])
    return MAX_DEGREE  # fp32 atomics and the f32 workspace


def slice_width(wg_k: int, tile_k: int, degree: int) -> int:
    """K elements per slice: ceil(wg_K / (tile_k·degree)) whole tiles, at least one tile."""
    return max(1, -(-wg_k // (tile_k * degree))) * tile_k


@dataclass(frozen=True)
class SplitPlan:
    """How one launch splits K. ``grid`` = (N tiles, M tiles, groups · degree)."""

    degree: int
    slice_k: int
    reduction: str
    grid: tuple[int, int, int]
    workspace_bytes: int
    ws_replicas: int
    source: str  # "auto" | "override" | "explicit" | "fixed" (no split-K reduction)

    @property
    def ctas(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    def describe(self) -> str:
        return (f"split {self.degree} ({self.source}) x {self.slice_k} K, {self.reduction}, "
                f"grid {self.grid[0]}x{self.grid[1]}x{self.grid[2]}")


def plan_split_k(spec: KernelSpec, problem: ConvProblem, *, split_k: int | None = None,  # noqa: PLR0913 - the policy's inputs, all keyword
                 override: int | None = None, free_reduction: bool = False,
                 resident_ctas: int | None = None) -> SplitPlan:
    """Resolve the split of ``problem`` on ``spec``'s kernel.

    ``split_k``: an explicit degree (kept). ``override``: the resolver's override of the
    automatic degree. ``free_reduction``: the caller may switch a packed-atomic launch to the
    two-stage workspace (it has a two-stage kernel of the same geometry). ``resident_ctas``:
    the kernel's CTAs per CU from its code object (the "waves" rule's rounds; None:
    ``RESIDENT_CTAS``). A kernel without a split-K reduction always runs degree 1; asking
    it for more is a ValueError.
    """
    p, red = problem, spec.reduction
    if (split_k is not None and split_k < 1) or (override is not None and override < 1):
        raise ValueError(f"split degree must be >= 1, got {split_k or override}")
    if red == "none":
        if split_k is not None and split_k > 1:
            raise ValueError(f"{spec.label()} has no split-K reduction: degree {split_k} "
                             "needs an atomic or two-stage kernel")
        return _plan(spec, p, 1, "none", "fixed")
    k_tiles = -(-p.wg_K // spec.k_step)
    z_groups = _z_groups(spec, p)
    if split_k is not None:
        if z_groups * split_k > MAX_GRID_Z:
            raise ValueError(f"gridDim.z = groups {z_groups} x split {split_k} "
                             f"exceeds {MAX_GRID_Z}")
        return _plan(spec, p, split_k, red, "explicit")
    z_cap = max(1, MAX_GRID_Z // z_groups)
    if override is not None:
        degree = override
        packed = red == "atomic" and spec.dw_dtype != "fp32"
        if packed and degree > MAX_DEGREE:
            if free_reduction:
                red = "two_stage"
            else:
                degree = MAX_DEGREE
        return _plan(spec, p, min(degree, z_cap), red, "override")
    n_tiles, m_tiles = _tiles(spec, p)
    base = n_tiles * m_tiles * z_groups
    fill = FILL_CTAS_GROUPED if z_groups > 1 else FILL_CTAS
    cap = min(max(1, p.wg_K // MIN_SLICE_K), degree_cap(spec.dw_dtype, red), k_tiles, z_cap)
    size = device_size(spec.target)
    if size.split == "waves":
        slots = size.cu_count * max(1, resident_ctas or RESIDENT_CTAS)
        degree = wave_degree(base, k_tiles, cap, slots)
    else:
        degree = xcd_snap(min(max(1, fill // base), cap), base, size.xcd_count, cap)
    # no empty slices on an automatic split: the same slice width with fewer CTAs
    width = slice_width(p.wg_K, spec.k_step, degree)
    degree = max(1, -(-p.wg_K // width))
    return _plan(spec, p, degree, red, "auto")


def wave_degree(base: int, k_tiles: int, cap: int, slots: int) -> int:
    """The degree in [1, cap] whose launch takes the fewest K-tile steps per CU: rounds of
    ``slots`` CTAs (CUs x resident CTAs), each round one slice of ceil(k_tiles / degree)
    tiles long; the smallest such degree (fewer partial sums to add)."""
    return min(range(1, cap + 1), key=lambda d: (-(-base * d // slots) * -(-k_tiles // d), d))


def xcd_snap(degree: int, base: int, xcds: int, cap: int) -> int:
    """``degree`` as a multiple of xcds / gcd(base, xcds) (module docstring), if that stays
    within ``cap``; else ``degree`` unchanged."""
    step = xcds // math.gcd(base, xcds)
    if step <= 1:
        return degree
    snapped = step if degree < step else degree // step * step
    return snapped if snapped <= cap else degree


def _tiles(spec: KernelSpec, p: ConvProblem) -> tuple[int, int]:
    """Grid x and y: (N tiles, M tiles); a direct kernel's (channel blocks, 1): of C for
    depthwise, of K for small-C."""
    if is_direct(spec):
        return -(-(p.C if is_depthwise(spec) else p.K) // spec.tile_n), 1
    return -(-p.wg_N // spec.tile_n), -(-p.wg_M // spec.tile_m)


def _z_groups(spec: KernelSpec, p: ConvProblem) -> int:
    """The groups grid z holds beside the split: a depthwise kernel's channel blocks hold
    its groups, and a small-C kernel has one, so a direct kernel's z is the split alone."""
    return 1 if is_direct(spec) else p.groups


def _plan(spec: KernelSpec, p: ConvProblem, degree: int, reduction: str,
          source: str) -> SplitPlan:
    n_tiles, m_tiles = _tiles(spec, p)
    replicas = 0
    ws = 0
    if reduction == "two_stage":
        replicas = spec.ws_replicas or DEFAULT_WS_REPLICAS
        ws = p.groups * replicas * p.wg_M * p.wg_N * 4
    return SplitPlan(degree=degree, slice_k=slice_width(p.wg_K, spec.k_step, degree),
                     reduction=reduction,
                     grid=(n_tiles, m_tiles, _z_groups(spec, p) * degree),
                     workspace_bytes=ws, ws_replicas=replicas, source=source)
