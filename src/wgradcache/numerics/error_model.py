"""The error model a numerics test compares against.

A rigorous float64 bound on the peak-normalised error max|out − ref| / max|ref| of one
launch, built from the data (sums of magnitudes), the slice layout of split-K and the
storage rounding of dW. It replaces upstream's flat 5e-2 tolerance, which would hide a wrong
lane map on a short reduction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from wgradcache.model.problem import ConvProblem
from wgradcache.numerics.reference import reference_dw, slice_partials

__all__ = ["unit_roundoff", "ErrorBound", "SplitLayout", "error_bound", "peak_normalised_error"]


def unit_roundoff(dtype: str) -> float:
    """Half an ulp at 1.0: 2^-24 fp32, 2^-11 fp16 (10 fraction bits), 2^-8 bf16 (7 bits)."""
    return {"fp32": 2.0 ** -24, "fp16": 2.0 ** -11, "bf16": 2.0 ** -8}[dtype]


def _underflow(dtype: str) -> float:
    """Absolute error of one rounding in the subnormal range (half the smallest spacing)."""
    return {"fp32": 2.0 ** -150, "fp16": 2.0 ** -25, "bf16": 2.0 ** -134}[dtype]


@dataclass(frozen=True)
class ErrorBound:
    """A bound on max|out − ref| (``abs``) and on the peak-normalised error (``bound``)."""

    bound: float
    abs: float
    peak: float  # max|ref|
    terms: tuple[tuple[str, float], ...]  # each source's peak-normalised share (largest element)


@dataclass(frozen=True)
class SplitLayout:
    """What of a launch's split-K plan its rounding depends on (``SplitPlan``'s degree,
    slice width, reduction and workspace replicas); the default: no split."""

    split_k: int = 1
    slice_k: int | None = None  # None: the whole reduction
    reduction: str = "none"
    ws_replicas: int = 1


def error_bound(problem: ConvProblem, x: np.ndarray, dy: np.ndarray, dw_dtype: str,
                split: SplitLayout = SplitLayout()) -> ErrorBound:
    """Rigorous float64 bound on the error of one launch, per dW element then maximised.

    The model (u = unit roundoff):
    * products of 16-bit inputs are exact in fp32 (≤ 22 significant bits);
    * f32 accumulation of n terms adds at most n·u32 · Σ|a·b| (over the slice: each slice is
      its own accumulator of slice_k terms);
    * the split-K sum: S slices of partials P_s. An atomic into a 16-bit dW rounds the partial
      to 16 bits (u16·|P_s|) and every add but the first into zero rounds the running sum,
      whose magnitude is at most Σ_s |P_s| whatever the order; float atomics (fp32 dW, the
      two-stage workspace) do the same with u32; stage 2 adds R slabs in f32;
    * a 16-bit dW then takes at most one final rounding (u16·|value|) when nothing rounded
      it on the way (no split, or the two-stage conversion).
    Subnormal results add half the smallest spacing per rounding.
    """
    split_k, slice_k, reduction = split.split_k, split.slice_k, split.reduction
    ref = reference_dw(problem, x, dy)
    peak = float(np.max(np.abs(ref))) if ref.size else 0.0
    wk = problem.wg_K
    slice_k = wk if slice_k is None or split_k <= 1 else slice_k
    slice_k = max(1, min(slice_k, max(wk, 1)))
    parts = slice_partials(problem, x, dy, slice_k)
    mags = slice_partials(problem, x, dy, slice_k, magnitudes=True)
    degree = parts.shape[0]  # non-empty slices: empty ones add exact zeros
    u32 = unit_roundoff("fp32")
    terms: dict[str, np.ndarray] = {}
    # f32 accumulation inside each slice (length of the longest slice bounds each)
    terms["f32 accumulation"] = slice_k * u32 * mags.sum(axis=0)
    acc_err = terms["f32 accumulation"]
    run = np.abs(parts).sum(axis=0) + acc_err  # any running sum of partials is below this
    if reduction == "atomic" and split_k > 1:
        if dw_dtype == "fp32":
            terms["f32 atomic adds"] = (degree - 1) * (u32 * run + _underflow("fp32"))
        else:
            u16 = unit_roundoff(dw_dtype)
            terms[f"{dw_dtype} partial conversion"] = u16 * run + degree * _underflow(dw_dtype)
            terms[f"{dw_dtype} packed atomic adds"] = (degree - 1) * (
                u16 * run * (1 + degree * u16) + _underflow(dw_dtype))
    elif reduction == "two_stage" and split_k > 1:
        r = max(1, min(split.ws_replicas, degree))
        terms["f32 workspace atomics"] = (degree - 1) * (u32 * run + _underflow("fp32"))
        terms["f32 stage-2 sum"] = (r - 1) * u32 * run * (1 + degree * u32)
    elif reduction not in ("none", "atomic", "two_stage"):
        raise ValueError(f"unknown reduction {reduction!r}")
    pre_store = sum(terms.values())
    rounds_at_store = dw_dtype != "fp32" and not (reduction == "atomic" and split_k > 1)
    if rounds_at_store:
        u16 = unit_roundoff(dw_dtype)
        terms[f"{dw_dtype} store rounding"] = u16 * (np.abs(ref) + pre_store) + _underflow(dw_dtype)
    total = sum(terms.values())
    abs_bound = float(np.max(total)) if total.size else 0.0
    denom = peak if peak > 0 else 1.0
    shares = tuple((name, float(np.max(t)) / denom) for name, t in terms.items())
    return ErrorBound(bound=abs_bound / denom, abs=abs_bound, peak=peak, terms=shares)


def peak_normalised_error(out: np.ndarray, ref: np.ndarray) -> float:
    """max|out − ref| / max|ref| (max|ref| taken as 1 when ref is all zeros)."""
    peak = float(np.max(np.abs(ref))) if ref.size else 0.0
    diff = float(np.max(np.abs(np.asarray(out, np.float64) - ref))) if ref.size else 0.0
    if math.isnan(diff):
        return math.inf
    return diff / (peak if peak > 0 else 1.0)
