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

from wgradcache.kernel.emulate import EmulationError, bf16_to_f32, emulate, f32_to_bf16
from wgradcache.kernel.ir import KernelDef
from wgradcache.model.problem import ConvProblem
from wgradcache.model.spec import KernelSpec
from wgradcache.numerics.error_model import ErrorBound, error_bound, peak_normalised_error
from wgradcache.numerics.reference import make_inputs, reference_dw
from wgradcache.wgrad.abi import buffer_bytes, stage2_values, wgrad_values
from wgradcache.wgrad.capability import serves
from wgradcache.wgrad.kernel import build_kernel
from wgradcache.wgrad.split_k import SplitPlan, plan_split_k
from wgradcache.wgrad.stage2 import build_stage2, stage2_grid

__all__ = ["EmulationReport", "EmulateRequest", "NotServed", "emulate_one", "prepare_run",
           "run_emulated", "to_storage", "from_storage", "cached_kernel"]


@dataclass(frozen=True)
class EmulationReport:
    """One launch judged against float64: in the emulator (``where`` = "emulator") or on a
    device (``runtime.launch``, ``where`` = the device). ``fault`` is what stopped the run
    (an emulator hazard, a HIP error; '' when none); then ``out`` is None and ``passed``
    False."""

    label: str
    problem: str
    plan: SplitPlan
    out: np.ndarray | None
    ref: np.ndarray
    error: float
    bound: ErrorBound
    passed: bool
    fault: str
    where: str = "emulator"

    @property
    def hazards(self) -> str:
        return self.fault if self.where == "emulator" else ""

    @property
    def failure(self) -> str:
        return "" if self.where == "emulator" else self.fault

    def to_json(self) -> dict:
        return {"label": self.label, "problem": self.problem, "split": self.plan.describe(),
                "split_k": self.plan.degree, "reduction": self.plan.reduction,
                "error": None if self.out is None else self.error, "bound": self.bound.bound,
                "bound_terms": dict(self.bound.terms), "passed": self.passed,
                "hazard": self.hazards}

    def summary(self) -> str:
        state = "PASS" if self.passed else "FAIL"
        err = "n/a" if self.out is None else f"{self.error:.3e}"
        on = "" if self.where == "emulator" else f" ({self.where})"
        kind = "hazard" if self.where == "emulator" else "HIP"
        return (f"{state} {self.label} on {self.problem}{on}: error {err} <= bound "
                f"{self.bound.bound:.3e}? ({self.plan.describe()})"
                + (f"; {kind}: {self.fault}" if self.fault else ""))


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


def to_storage(values: np.ndarray, dtype: str) -> np.ndarray:
    """float64 values (exactly representable) -> the emulator's storage array of ``dtype``
    (fp16 float16, bf16 uint16 bit patterns, fp32 float32)."""
    if dtype == "fp16":
        return np.ascontiguousarray(values, dtype=np.float16)
    if dtype == "bf16":
        return f32_to_bf16(np.asarray(values, np.float32))
    return np.ascontiguousarray(values, dtype=np.float32)


def from_storage(arr: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bf16":
        return bf16_to_f32(arr).astype(np.float64)
    return np.asarray(arr).astype(np.float64)


def _empty(dtype: str, shape, fill: float) -> np.ndarray:
    return to_storage(np.full(shape, fill), dtype)


@functools.lru_cache(maxsize=256)
def cached_kernel(spec: KernelSpec) -> KernelDef:
    """build_kernel, memoised per spec (building is pure)."""
    return build_kernel(spec)


@functools.lru_cache(maxsize=16)
def _cached_stage2(target: str, dw_dtype: str, replicas: int) -> KernelDef:
    return build_stage2(target, dw_dtype, replicas)


def prepare_run(spec: KernelSpec, problem: ConvProblem, *, split_k: int | None, seed: int
                ) -> tuple[SplitPlan, np.ndarray, np.ndarray, np.ndarray, ErrorBound]:
    """What every numerics run of ``spec`` on ``problem`` starts from, wherever it runs (the
    emulator here, a device in ``runtime.launch``): the split plan, the seeded inputs, the
    float64 reference and the error bound. ValueError when the kernel cannot serve the
    problem or the split degree."""
    ok, why = serves(spec, problem)
    if not ok:
        raise ValueError(f"{spec.label()} cannot serve problem {problem.short()}: {why}")
    plan = plan_split_k(spec, problem, split_k=split_k)
    ok, why = serves(spec, problem, degree=plan.degree)
    if not ok:
        raise ValueError(f"{spec.label()} cannot run problem {problem.short()} at split "
                         f"{plan.degree}: {why}")
    x, dy = make_inputs(problem, spec.dtype, seed)
    ref = reference_dw(problem, x, dy)
    bound = error_bound(problem, x, dy, spec.dw_dtype, split_k=plan.degree,
                        slice_k=plan.slice_k, reduction=plan.reduction,
                        ws_replicas=plan.ws_replicas)
    return plan, x, dy, ref, bound


def run_emulated(spec: KernelSpec, problem: ConvProblem, *, split_k: int | None = None,
                 seed: int = 0, check_races: bool = True) -> EmulationReport:
    """Emulate ``spec``'s kernel on ``problem`` (seeded inputs) and compare with float64.

    Raises ValueError naming the reason when the kernel cannot serve the problem or the
    split degree. ``split_k`` is an explicit degree (None: the automatic policy).
    """
    plan, x, dy, ref, bound = prepare_run(spec, problem, split_k=split_k, seed=seed)
    atomic = plan.reduction == "atomic"
    dw = _empty(spec.dw_dtype, problem.dw_shape, 0.0 if atomic else np.nan)
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
