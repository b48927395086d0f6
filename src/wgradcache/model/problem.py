"""A 2-D convolution weight-gradient problem, its GEMM view, a float64 reference and an
error model.

The wgrad of one group is a GEMM (DESIGN §4): M = kpg (output channels of the group),
N = Y·X·cpg (filter taps × input channels), K_red = N·Ho·Wo (every output position).
Layouts: X is NHWC, dY is NHWK over (Ho, Wo), dW is KYXC packed per group ([K, Y, X, cpg],
PyTorch's grouped weight layout), so dW is also [groups, wg_M, wg_N] in row-major order.

The error model is what a numerics test compares against: a rigorous float64 bound on the
peak-normalised error max|out − ref| / max|ref| of one launch, built from the data (sums of
magnitudes), the slice layout of split-K and the storage rounding of dW. It replaces
upstream's flat 5e-2 tolerance, which would hide a wrong lane map on a short reduction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

__all__ = [
    "ConvProblem", "reference_dw", "make_inputs", "round_to_dtype", "unit_roundoff",
    "slice_partials", "ErrorBound", "error_bound", "peak_normalised_error", "Layer",
    "load_layers",
]

_FIELDS = ("N", "C", "H", "W", "K", "Y", "X", "stride", "pad", "dilation", "groups")


@dataclass(frozen=True)
class ConvProblem:
    """One wgrad problem. Square stride, padding and dilation (one value for H and W)."""

    N: int
    C: int
    H: int
    W: int
    K: int
    Y: int
    X: int
    stride: int = 1
    pad: int = 0
    dilation: int = 1
    groups: int = 1

    def __post_init__(self) -> None:
        ok, why = self.check()
        if not ok:
            raise ValueError(f"bad problem {self.short()}: {why}")

    def check(self) -> tuple[bool, str]:
        for f in fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, int) or isinstance(v, bool):
                return False, f"{f.name} must be an integer, got {v!r}"
        for name in ("N", "C", "H", "W", "K", "Y", "X", "stride", "dilation", "groups"):
            if getattr(self, name) < 1:
                return False, f"{name} must be >= 1, got {getattr(self, name)}"
        if self.pad < 0:
            return False, f"pad must be >= 0, got {self.pad}"
        if self.C % self.groups:
            return False, f"C={self.C} is not divisible by groups={self.groups}"
        if self.K % self.groups:
            return False, f"K={self.K} is not divisible by groups={self.groups}"
        if self.Ho < 1 or self.Wo < 1:
            return False, (f"empty output {self.Ho}x{self.Wo}: a {self.Y}x{self.X} filter with "
                           f"dilation {self.dilation} does not fit {self.H}x{self.W} padded by "
                           f"{self.pad}")
        return True, ""

    @staticmethod
    def parse(text: str) -> ConvProblem:
        """'N,C,H,W,K,Y,X[,stride,pad,dilation,groups]' -> ConvProblem; ValueError names why."""
        parts = [p.strip() for p in str(text).split(",")]
        if not 7 <= len(parts) <= 11:
            raise ValueError(f"problem {text!r} has {len(parts)} fields; expected "
                             "N,C,H,W,K,Y,X[,stride,pad,dilation,groups] (7 to 11)")
        values = []
        for name, p in zip(_FIELDS, parts, strict=False):
            try:
                values.append(int(p, 10))
            except ValueError:
                raise ValueError(f"problem {text!r}: {name} {p!r} is not an integer") from None
        return ConvProblem(*values)

    def short(self) -> str:
        """The parse() form, trailing defaults dropped."""
        vals = [getattr(self, f) for f in _FIELDS]
        defaults = (1, 0, 1, 1)
        while len(vals) > 7 and vals[-1] == defaults[len(vals) - 8]:
            vals.pop()
        return ",".join(str(v) for v in vals)

    # ---- derived extents --------------------------------------------------------------
    @property
    def Ho(self) -> int:  # noqa: N802 - the conventional name
        return (self.H + 2 * self.pad - self.dilation * (self.Y - 1) - 1) // self.stride + 1

    @property
    def Wo(self) -> int:  # noqa: N802
        return (self.W + 2 * self.pad - self.dilation * (self.X - 1) - 1) // self.stride + 1

    @property
    def kpg(self) -> int:
        return self.K // self.groups

    @property
    def cpg(self) -> int:
        return self.C // self.groups

    @property
    def wg_M(self) -> int:  # noqa: N802
        return self.kpg

    @property
    def wg_N(self) -> int:  # noqa: N802
        return self.Y * self.X * self.cpg

    @property
    def wg_K(self) -> int:  # noqa: N802
        return self.N * self.Ho * self.Wo

    @property
    def x_shape(self) -> tuple[int, int, int, int]:
        return (self.N, self.H, self.W, self.C)

    @property
    def dy_shape(self) -> tuple[int, int, int, int]:
        return (self.N, self.Ho, self.Wo, self.K)

    @property
    def dw_shape(self) -> tuple[int, int, int, int]:
        return (self.K, self.Y, self.X, self.cpg)

    @property
    def flops(self) -> int:
        return 2 * self.groups * self.wg_M * self.wg_N * self.wg_K


# ---- reference -------------------------------------------------------------------------

def _taps(problem: ConvProblem, x: np.ndarray):
    """Yield (y, x, X window [N, Ho, Wo, C]) per filter tap, zero padding explicit."""
    p, s, d = problem.pad, problem.stride, problem.dilation
    xp = np.pad(np.asarray(x, dtype=np.float64), ((0, 0), (p, p), (p, p), (0, 0)))
    hs = (problem.Ho - 1) * s + 1
    ws = (problem.Wo - 1) * s + 1
    for ty in range(problem.Y):
        for tx in range(problem.X):
            yield ty, tx, xp[:, ty * d:ty * d + hs:s, tx * d:tx * d + ws:s, :]


def reference_dw(problem: ConvProblem, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dW [K, Y, X, cpg] in float64: one matmul per (tap, group) over all output positions.

    Inputs are 16-bit-representable, so every product is exact in float64 and the sums are
    correct to ~1e-16 relative: far below any bound we test against.
    """
    _check_shapes(problem, x, dy)
    g, kpg, cpg = problem.groups, problem.kpg, problem.cpg
    dyf = np.asarray(dy, dtype=np.float64).reshape(problem.wg_K, g, kpg)
    dw = np.zeros(problem.dw_shape, dtype=np.float64)
    for ty, tx, win in _taps(problem, x):
        xw = win.reshape(problem.wg_K, g, cpg)
        dw[:, ty, tx, :] = np.einsum("rgk,rgc->gkc", dyf, xw).reshape(problem.K, cpg)
    return dw


def slice_partials(problem: ConvProblem, x: np.ndarray, dy: np.ndarray, slice_k: int,
                   magnitudes: bool = False) -> np.ndarray:
    """Per-slice partial sums [S, K, Y, X, cpg] over K-slices of width slice_k (float64).

    With magnitudes=True, the slices of Σ|dY·X| instead (the error model's sums of magnitudes).
    """
    _check_shapes(problem, x, dy)
    g, kpg, cpg, wk = problem.groups, problem.kpg, problem.cpg, problem.wg_K
    n_slices = max(1, -(-wk // slice_k))
    dyf = np.asarray(dy, dtype=np.float64).reshape(wk, g, kpg)
    if magnitudes:
        dyf = np.abs(dyf)
    out = np.zeros((n_slices, *problem.dw_shape), dtype=np.float64)
    for ty, tx, win in _taps(problem, x):
        xw = win.reshape(wk, g, cpg)
        if magnitudes:
            xw = np.abs(xw)
        for s in range(n_slices):
            lo, hi = s * slice_k, min(wk, (s + 1) * slice_k)
            part = np.einsum("rgk,rgc->gkc", dyf[lo:hi], xw[lo:hi])
            out[s, :, ty, tx, :] = part.reshape(problem.K, cpg)
    return out


def _check_shapes(problem: ConvProblem, x: np.ndarray, dy: np.ndarray) -> None:
    if tuple(x.shape) != problem.x_shape:
        raise ValueError(f"X has shape {tuple(x.shape)}, problem wants NHWC {problem.x_shape}")
    if tuple(dy.shape) != problem.dy_shape:
        raise ValueError(f"dY has shape {tuple(dy.shape)}, problem wants NHWK {problem.dy_shape}")


# ---- inputs ----------------------------------------------------------------------------

def round_to_dtype(values: np.ndarray, dtype: str) -> np.ndarray:
    """Round float values to the nearest fp16 / bf16 / fp32 value (ties to even), as float64."""
    v = np.asarray(values, dtype=np.float64)
    if dtype == "fp16":
        return v.astype(np.float16).astype(np.float64)
    if dtype == "fp32":
        return v.astype(np.float32).astype(np.float64)
    if dtype == "bf16":
        bits = v.astype(np.float32).view(np.uint32).astype(np.uint64)
        # round-to-nearest-even on the low 16 bits (no NaN inputs here)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.astype(np.uint32).view(np.float32).astype(np.float64)
    raise ValueError(f"unknown dtype {dtype!r}")


def make_inputs(problem: ConvProblem, dtype: str, seed: int = 0
                ) -> tuple[np.ndarray, np.ndarray]:
    """(X, dY) as float64 arrays whose every value is exactly representable in ``dtype``.

    Uniform in [-1, 1) rounded to the dtype: signed, full-mantissa values, so the test sees
    cancellation and real rounding, and a wrong lane or tap cannot hide behind repeated values.
    The caller converts to the storage format the launch needs (exact by construction).
    """
    rng = np.random.default_rng(seed)
    x = round_to_dtype(rng.uniform(-1.0, 1.0, problem.x_shape), dtype)
    dy = round_to_dtype(rng.uniform(-1.0, 1.0, problem.dy_shape), dtype)
    return x, dy


# ---- error model -----------------------------------------------------------------------

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


def error_bound(problem: ConvProblem, x: np.ndarray, dy: np.ndarray, dw_dtype: str, *,
                split_k: int = 1, slice_k: int | None = None, reduction: str = "none",
                ws_replicas: int = 1) -> ErrorBound:
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
        r = max(1, min(ws_replicas, degree))
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


# ---- reference layer sets ------------------------------------------------------------------

@dataclass(frozen=True)
class Layer:
    """One named layer of a reference set, weighted by how often its network repeats it."""

    name: str
    problem: ConvProblem
    count: int = 1


def load_layers(path) -> tuple[Layer, ...]:
    """Read a layer set (``layers/reference.yaml`` format); ValueError names the bad entry."""
    import yaml

    with open(path) as f:
        doc = yaml.safe_load(f)
    if not isinstance(doc, dict) or doc.get("schema") != 1 or not isinstance(
            doc.get("layers"), list):
        raise ValueError(f"{path}: expected 'schema: 1' and a 'layers' list")
    out, seen = [], set()
    for i, entry in enumerate(doc["layers"]):
        where = f"{path}: layers[{i}]"
        if not isinstance(entry, dict) or set(entry) - {"name", "problem", "count"}:
            raise ValueError(f"{where}: expected name, problem and optional count")
        name, count = str(entry.get("name", "")), entry.get("count", 1)
        if not name or name in seen:
            raise ValueError(f"{where}: missing or repeated name {name!r}")
        if not isinstance(count, int) or count < 1:
            raise ValueError(f"{where} ({name}): count must be a positive integer")
        try:
            problem = ConvProblem.parse(str(entry.get("problem", "")))
        except ValueError as e:
            raise ValueError(f"{where} ({name}): {e}") from None
        seen.add(name)
        out.append(Layer(name, problem, count))
    return tuple(out)
