"""What every numerics run of a kernel starts from and how it is judged, wherever it runs:
the emulator (``pipeline/emulate.py``) and a device (``runtime/launch.py``) both import it,
so neither imports the other.

The storage conversion (float64 values <-> the arrays a kernel reads and writes), the split
plan, the seeded inputs, the float64 reference and the error bound (``prepare_run``), and
the one report both kinds of launch return (``EmulationReport``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wgradcache.kernel.emulate import bf16_to_f32, f32_to_bf16
from wgradcache.model.problem import ConvProblem
from wgradcache.model.spec import KernelSpec
from wgradcache.numerics.error_model import ErrorBound, SplitLayout, error_bound
from wgradcache.numerics.reference import make_inputs, reference_dw
from wgradcache.wgrad.capability import serves
from wgradcache.wgrad.split_k import SplitPlan, plan_split_k

__all__ = ["EmulationReport", "prepare_run", "to_storage", "from_storage"]


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
    bound = error_bound(problem, x, dy, spec.dw_dtype,
                        SplitLayout(plan.degree, plan.slice_k, plan.reduction, plan.ws_replicas))
    return plan, x, dy, ref, bound
