"""One kernel in the emulator against the float64 reference: what ``wgradcache emulate`` and
``verify --level numerics`` run.

The launch follows the contract a real one has: ``serves`` first (a kernel is never handed
a problem it would compute wrong), the split plan of ``split_k.py``, dW zeroed before an
atomic launch and the workspace zeroed before stage 1; a non-atomic dW starts as NaN so an
element the kernel forgets to write cannot pass as a correct zero.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from wgradcache.kernel.emulate import EmulationError, emulate
from wgradcache.kernel.ir import KernelDef
from wgradcache.model.problem import ConvProblem
from wgradcache.model.spec import KernelSpec
from wgradcache.numerics.error_model import peak_normalised_error
from wgradcache.numerics.run import EmulationReport, from_storage, prepare_run, to_storage
from wgradcache.wgrad.abi import buffer_bytes, stage2_values, wgrad_values
from wgradcache.wgrad.capability import serves
from wgradcache.wgrad.kernel import build_kernel
from wgradcache.wgrad.stage2 import build_stage2, stage2_grid

__all__ = ["EmulateRequest", "NotServed", "emulate_one", "run_emulated", "cached_kernel"]


class NotServed(ValueError):
    """The spec is invalid under the job data, or cannot serve the problem (or degree)."""


@dataclass(frozen=True)
class EmulateRequest:
    """``wgradcache emulate``'s options."""

    spec: KernelSpec
    problem: ConvProblem
    split_k: int | None = None  # None: the policy's degree
    seed: int = 0
    geometries_file: str | None = None  # the job data whose rules the spec must obey


def emulate_one(req: EmulateRequest) -> EmulationReport:
    """Check the spec against the rules and ``serves``, then emulate it (NotServed: why not)."""
    from wgradcache.jobs import default_jobdata
    from wgradcache.model.spec import validate

    limits = default_jobdata(req.geometries_file).limits_for(req.spec.target)
    ok, why = validate(req.spec, limits=limits)
    if not ok:
        raise NotServed(f"{req.spec.label()}: {why}")
    ok, why = serves(req.spec, req.problem, req.split_k)
    if not ok:
        raise NotServed(f"{req.spec.label()} cannot serve {req.problem.short()}: {why}")
    return run_emulated(req.spec, req.problem, split_k=req.split_k, seed=req.seed)


@functools.lru_cache(maxsize=256)
def cached_kernel(spec: KernelSpec) -> KernelDef:
    """build_kernel, memoised per spec (building is pure)."""
    return build_kernel(spec)


@functools.lru_cache(maxsize=16)
def _cached_stage2(target: str, dw_dtype: str, replicas: int) -> KernelDef:
    return build_stage2(target, dw_dtype, replicas)


def run_emulated(spec: KernelSpec, problem: ConvProblem, *, split_k: int | None = None,
                 seed: int = 0, check_races: bool = True) -> EmulationReport:
    """Emulate ``spec``'s kernel on ``problem`` (seeded inputs) and compare with float64.

    Raises ValueError naming the reason when the kernel cannot serve the problem or the
    split degree. ``split_k`` is an explicit degree (None: the automatic policy).
    """
    plan, x, dy, ref, bound = prepare_run(spec, problem, split_k=split_k, seed=seed)
    atomic = plan.reduction == "atomic"
    dw = to_storage(np.full(problem.dw_shape, 0.0 if atomic else np.nan), spec.dw_dtype)
    sizes = buffer_bytes(problem, spec.dtype, spec.dw_dtype, plan.ws_replicas)
    ws = np.zeros(max(1, sizes["ws"] // 4), np.float32)
    bufs = {"dy_ptr": to_storage(dy, spec.dtype), "x_ptr": to_storage(x, spec.dtype),
            "dw_ptr": dw, "ws_ptr": ws}
    args = wgrad_values(problem, spec, degree=plan.degree, slice_k=plan.slice_k)
    args.update(bufs)
    hazards = ""
    try:
        emulate(cached_kernel(spec), plan.grid, args, check_races=check_races)
        if plan.reduction == "two_stage":
            s2 = stage2_values(problem, spec.dw_dtype, plan.ws_replicas)
            s2.update(ws_ptr=ws, dw_ptr=dw)
            emulate(_cached_stage2(spec.target, spec.dw_dtype, plan.ws_replicas),
                    stage2_grid(s2["total_elems"]), s2, check_races=check_races)
    except EmulationError as e:
        hazards = str(e)
    out = None if hazards else from_storage(dw, spec.dw_dtype).reshape(problem.dw_shape)
    error = float("inf") if out is None else peak_normalised_error(out, ref)
    return EmulationReport(label=spec.label(), problem=problem.short(), plan=plan, out=out,
                           ref=ref, error=error, bound=bound,
                           passed=not hazards and error <= bound.bound, fault=hazards)
