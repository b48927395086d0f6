"""The float64 reference dW, its per-slice partial sums, and the inputs a test feeds both.

Inputs are drawn so that every value is exact in the storage dtype (``round_to_dtype``):
the kernel and the reference then see the same numbers, and every difference is the
kernel's rounding, which ``error_model`` bounds.
"""

from __future__ import annotations

import numpy as np

from wgradcache.model.problem import ConvProblem

__all__ = ["reference_dw", "slice_partials", "round_to_dtype", "make_inputs"]


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
