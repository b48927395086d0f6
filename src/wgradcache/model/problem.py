"""A 2-D convolution weight-gradient problem, its parse form and its GEMM view.

The wgrad of one group is a GEMM (DESIGN §4): M = kpg (output channels of the group),
N = Y·X·cpg (filter taps × input channels), K_red = N·Ho·Wo (every output position).
Layouts: X is NHWC, dY is NHWK over (Ho, Wo), dW is KYXC packed per group ([K, Y, X, cpg],
PyTorch's grouped weight layout), so dW is also [groups, wg_M, wg_N] in row-major order.

The generators read this module (the ABI packs its extents), so it is part of the generator
digest; the float64 reference, the inputs and the error model live in ``numerics/``, which
no generator imports, so refining a bound re-emits nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

__all__ = ["ConvProblem", "MAX_FIELD"]

_FIELDS = ("N", "C", "H", "W", "K", "Y", "X", "stride", "pad", "dilation", "groups")
# Every field is a 32-bit signed kernel argument (wgrad/abi.py's scalars). Whether a
# problem's buffers fit the kernels' 31-bit offsets depends on the dtype, so that bound is
# serves' (wgrad/capability.py), which every command checks before it runs a kernel.
MAX_FIELD = 2 ** 31 - 1
# ASCII digits, an optional minus (so "-1" gets the range message): int() alone also takes
# "1_000", "+5" and full-width or other Unicode digits.
_INT = re.compile(r"-?[0-9]{1,20}")


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
            if v > MAX_FIELD:
                return False, f"{f.name} must be <= {MAX_FIELD} (2**31-1), got {v}"
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
        """'N,C,H,W,K,Y,X[,stride,pad,dilation,groups]' -> ConvProblem; ValueError names why
        in one line that quotes at most 20 characters of a field."""
        text = str(text)
        parts = [p.strip() for p in text.split(",", 11)]
        if not 7 <= len(parts) <= 11:
            n = len(parts) if len(parts) <= 11 else f"{text.count(',') + 1}"
            raise ValueError(f"problem has {n} fields; expected "
                             "N,C,H,W,K,Y,X[,stride,pad,dilation,groups] (7 to 11)")
        values = []
        for name, p in zip(_FIELDS, parts, strict=False):
            if not _INT.fullmatch(p):
                shown = repr(p) if len(p) <= 20 else f"{p[:20]!r}..."
                raise ValueError(f"{name} {shown} is not an integer (ASCII digits 0-9, at "
                                 f"most {MAX_FIELD})")
            values.append(int(p))
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
