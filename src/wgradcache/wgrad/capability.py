"""Can a cached kernel compute a given problem? ``serves(spec, problem) -> (ok, reason)``.

A kernel is generic over extents (every size is a kernel argument), but some of its choices
bind the problem: the global load widths must divide the channel runs they load along (a
vector never crosses a (y, x) boundary of X nor a group of dY), a packed 16-bit atomic
writes dword pairs (wg_N even), the dispatch packet's grid fields are 16 bits on y and z,
and offsets are 31-bit. One predicate answers for ``select``, ``emulate`` and the HIP
launcher alike, so no caller can hand a kernel a problem it then computes wrong.
"""

from __future__ import annotations

from wgradcache.model.problem import ConvProblem
from wgradcache.model.spec import KernelSpec, elem_bytes, is_depthwise, is_small_c, validate
from wgradcache.wgrad.abi import MAX_BUFFER_BYTES, buffer_bytes

__all__ = ["serves", "MAX_GRID_Y", "MAX_GRID_Z"]

MAX_GRID_Y = 65535
MAX_GRID_Z = 65535  # gridDim.z = groups * split degree (a 16-bit dispatch-packet field)


def serves(spec: KernelSpec, problem: ConvProblem, degree: int | None = None
           ) -> tuple[bool, str]:
    """(True, "") when ``spec``'s kernel computes ``problem`` exactly; else the first reason.

    ``degree``, when given, is the split degree of the launch (checked against gridDim.z).
    """
    ok, why = validate(spec, limits=None)  # budgets bound the walk, not what is correct
    if not ok:
        return False, f"invalid kernel spec: {why}"
    p = problem
    rule = (_depthwise_serves if is_depthwise(spec) else _small_c_serves if is_small_c(spec)
            else _gemm_serves)
    ok, why = rule(spec, p, degree)
    if not ok:
        return ok, why
    if degree is not None and degree > 1 and spec.reduction == "none":
        return False, f"split degree {degree} needs a split-K kernel (reduction is none)"
    replicas = spec.ws_replicas if spec.reduction == "two_stage" else 0
    for buf, nbytes in buffer_bytes(p, spec.dtype, spec.dw_dtype, replicas).items():
        if nbytes > MAX_BUFFER_BYTES:
            return False, (f"{buf} is {nbytes} B: offsets are 31-bit (at most "
                           f"{MAX_BUFFER_BYTES} B per buffer)")
    return True, ""


def _gemm_serves(spec: KernelSpec, p: ConvProblem, degree: int | None) -> tuple[bool, str]:
    ok, why = _widths_divide(spec, p)
    if not ok:
        return ok, why
    if spec.reduction == "atomic" and spec.dw_dtype != "fp32" and p.wg_N % 2:
        return False, (f"packed {spec.dw_dtype} atomics write dword pairs: wg_N=Y*X*cpg="
                       f"{p.wg_N} is odd (use a two-stage kernel)")
    m_tiles = -(-p.wg_M // spec.tile_m)
    if m_tiles > MAX_GRID_Y:
        return False, f"{m_tiles} M tiles exceed gridDim.y {MAX_GRID_Y}"
    z = p.groups * (degree or 1)
    if z > MAX_GRID_Z:
        return False, (f"gridDim.z = groups {p.groups} x split {degree or 1} = {z} exceeds "
                       f"{MAX_GRID_Z}")
    return True, ""


def _depthwise_serves(spec: KernelSpec, p: ConvProblem, degree: int | None
                      ) -> tuple[bool, str]:
    """The direct depthwise kernel (``wgrad/depthwise.py``): one channel per group, a
    filter within its compiled taps, whole channel vectors, a run of output columns only
    where its pixels are shared (``KernelSpec.wo_run``), dword pairs of dW for a packed
    atomic, and grid z = the split degree alone."""
    if not p.groups == p.C == p.K:
        return False, (f"the depthwise kernel needs groups = C = K (got groups={p.groups}, "
                       f"C={p.C}, K={p.K})")
    if max(p.Y, p.X) > spec.tile_m:
        return False, (f"filter {p.Y}x{p.X} exceeds the kernel's {spec.tile_m}x{spec.tile_m} "
                       "taps")
    if p.C % spec.vec_b:
        return False, f"vec_b {spec.vec_b} does not divide C={p.C}"
    if spec.wo_run != 1 and (p.stride != 1 or p.dilation != 1 or p.Wo % spec.wo_run):
        return False, (f"a run of {spec.wo_run} output columns shares its pixels at stride 1 "
                       f"and dilation 1 with Wo a multiple of it (got stride {p.stride}, "
                       f"dilation {p.dilation}, Wo {p.Wo})")
    if spec.reduction == "atomic" and spec.dw_dtype != "fp32" and p.C * p.Y * p.X % 2:
        return False, (f"packed {spec.dw_dtype} atomics write dword pairs: C*Y*X="
                       f"{p.C * p.Y * p.X} is odd")
    if (degree or 1) > MAX_GRID_Z:
        return False, f"gridDim.z = split {degree} exceeds {MAX_GRID_Z}"
    return True, ""


def _small_c_serves(spec: KernelSpec, p: ConvProblem, degree: int | None
                    ) -> tuple[bool, str]:
    """The direct small-C kernel (``wgrad/small_c.py``): one group, C within its compiled
    channels, a filter within its compiled taps, whole dY vectors along K, and for a
    packed atomic dword pairs that stay in the CTA's run of dW: the run starts at
    k0·C·Y·X with k0 a multiple of the even channel block (validate) and holds
    min(K − k0, tile_n)·C·Y·X elements, so K·C·Y·X even (K even or C·Y·X even) keeps every
    run even; grid z = the split degree alone."""
    if p.groups != 1:
        return False, f"the small-C kernel needs groups = 1 (got groups={p.groups})"
    if p.C > spec.vec_b:
        return False, f"C={p.C} exceeds the kernel's {spec.vec_b} channels"
    if max(p.Y, p.X) > spec.tile_m:
        return False, (f"filter {p.Y}x{p.X} exceeds the kernel's {spec.tile_m}x{spec.tile_m} "
                       "taps")
    if p.K % spec.vec_a:
        return False, f"vec_a {spec.vec_a} does not divide K={p.K}"
    if spec.reduction == "atomic" and spec.dw_dtype != "fp32" and p.K * p.wg_N % 2:
        return False, (f"packed {spec.dw_dtype} atomics write dword pairs: K*C*Y*X="
                       f"{p.K * p.wg_N} is odd")
    if (degree or 1) > MAX_GRID_Z:
        return False, f"gridDim.z = split {degree} exceeds {MAX_GRID_Z}"
    return True, ""


def _widths_divide(spec: KernelSpec, p: ConvProblem) -> tuple[bool, str]:
    """A global vector (or async chunk) never crosses the channel run it loads along."""
    if spec.k_loop == "async":
        eb = elem_bytes(spec.dtype)
        for name, chunk, run, what in (("chunk_a", spec.chunk_a, p.kpg, "kpg"),
                                       ("chunk_b", spec.chunk_b, p.cpg, "cpg")):
            if run % (chunk // eb):
                return False, (f"async {name} of {chunk} B ({chunk // eb} elements) does not "
                               f"divide {what}={run}")
        return True, ""
    if p.kpg % spec.vec_a:
        return False, f"vec_a {spec.vec_a} does not divide kpg={p.kpg}"
    if p.cpg % spec.vec_b:
        return False, f"vec_b {spec.vec_b} does not divide cpg={p.cpg}"
    return True, ""
