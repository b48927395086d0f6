"""The kernel argument lists (the ABI) of the wgrad kernels and of the stage-2 reduce kernel.

Defined once, read by three consumers: the generator declares its parameters from
``WGRAD_ARGS`` / ``STAGE2_ARGS`` (through ``ir_args``), the emulator binds buffers and
scalars by these names, and the HIP launcher packs the same names into the kernarg segment
with ``pack``. A missing or extra value is an error at the host, never a silent zero
(upstream's lesson: the launch signature and the builder's parameters drifted apart).

Every wgrad kernel has the same signature whatever its variant: the two-stage workspace
pointer and its size are always present (null / 0 when the kernel does not use them), and
the split degree (``ks_count``) and the slice width (``ks``) are arguments, so one split-K
binary serves every degree. All scalars are 32-bit; byte sizes are unsigned (the async
copy's predicate compares ``byte_offset < num_bytes`` unsigned), and ``serves`` keeps every
buffer below 2^31 bytes so a valid element offset never needs more than 31 bits.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from wgradcache.model.problem import ConvProblem
from wgradcache.model.spec import KernelSpec, elem_bytes

__all__ = [
    "AbiArg", "WGRAD_ARGS", "STAGE2_ARGS", "STAGE2_BLOCK", "MAX_BUFFER_BYTES",
    "arg_names", "kernarg_layout", "binary_layout", "kernarg_size", "pack", "check_values",
    "buffer_bytes", "magic_u31", "wgrad_values", "stage2_values", "pointer_dtypes", "ir_args",
    "declare", "RecordFacts", "record_facts",
]

MAX_BUFFER_BYTES = 2 ** 31 - 1
STAGE2_BLOCK = 256  # threads of the stage-2 kernel: one element per thread, 1-D grid


@dataclass(frozen=True)
class AbiArg:
    """One kernel argument. ``kind`` is "ptr" (a global buffer, named by ``buffer``) or
    "i32"/"u32" (32-bit scalars; u32 marks byte sizes, compared unsigned)."""

    name: str
    kind: str
    buffer: str = ""  # ptr: "dy" | "x" | "dw" | "ws"
    readonly: bool = False
    doc: str = ""

    @property
    def size(self) -> int:
        return 8 if self.kind == "ptr" else 4


def _ptr(name: str, buffer: str, doc: str, readonly: bool = False) -> AbiArg:
    return AbiArg(name, "ptr", buffer, readonly, doc)


def _i32(name: str, doc: str) -> AbiArg:
    return AbiArg(name, "i32", doc=doc)


def _u32(name: str, doc: str) -> AbiArg:
    return AbiArg(name, "u32", doc=doc)


WGRAD_ARGS: tuple[AbiArg, ...] = (
    _ptr("dy_ptr", "dy", "dY, NHWK over (Ho, Wo), A dtype", readonly=True),
    _ptr("x_ptr", "x", "X, NHWC, A dtype", readonly=True),
    _ptr("dw_ptr", "dw", "dW, [K, Y, X, cpg]; zeroed before a split-K (atomic) launch"),
    _ptr("ws_ptr", "ws", "two-stage f32 workspace [groups*R, wg_M, wg_N]; null otherwise"),
    _u32("dy_bytes", "bytes of dY"),
    _u32("x_bytes", "bytes of X"),
    _u32("dw_bytes", "bytes of dW"),
    _u32("ws_bytes", "bytes of the workspace (0 without one)"),
    _i32("N", "batch"),
    _i32("H", "input height"),
    _i32("W", "input width"),
    _i32("C", "input channels (all groups)"),
    _i32("K", "output channels (all groups)"),
    _i32("Y", "filter height"),
    _i32("X", "filter width"),
    _i32("Ho", "output height"),
    _i32("Wo", "output width"),
    _i32("stride", "stride (H and W)"),
    _i32("pad", "padding (H and W)"),
    _i32("dilation", "dilation (H and W)"),
    _i32("groups", "groups"),
    _i32("kpg", "K per group"),
    _i32("cpg", "C per group"),
    _i32("wg_M", "GEMM M = kpg"),
    _i32("wg_N", "GEMM N = Y*X*cpg"),
    _i32("wg_K", "GEMM K = N*Ho*Wo"),
    _i32("HoWo", "Ho*Wo (k_wg -> n, ho, wo)"),
    _i32("Xcpg", "X*cpg (n_wg -> y, x, c)"),
    _u32("mag_HoWo", "magic multiplier of x // HoWo (see magic_u31)"),
    _i32("shr_HoWo", "its shift"),
    _u32("mag_Wo", "magic multiplier of x // Wo"),
    _i32("shr_Wo", "its shift"),
    _u32("mag_Xcpg", "magic multiplier of x // Xcpg"),
    _i32("shr_Xcpg", "its shift"),
    _u32("mag_cpg", "magic multiplier of x // cpg"),
    _i32("shr_cpg", "its shift"),
    _i32("ks", "slice width in K elements, a whole number of tile_k"),
    _i32("ks_count", "split degree: grid z = groups * ks_count"),
)

STAGE2_ARGS: tuple[AbiArg, ...] = (
    _ptr("ws_ptr", "ws", "f32 workspace [groups*R, wg_M, wg_N]", readonly=True),
    _ptr("dw_ptr", "dw", "dW [K, Y, X, cpg] = [groups, wg_M, wg_N]"),
    _u32("ws_bytes", "bytes of the workspace"),
    _u32("dw_bytes", "bytes of dW"),
    _i32("groups", "groups"),
    _i32("slab_elems", "wg_M*wg_N: elements of one group's slab"),
    _i32("total_elems", "groups*wg_M*wg_N: elements of dW"),
)


def arg_names(args: tuple[AbiArg, ...]) -> tuple[str, ...]:
    return tuple(a.name for a in args)


@dataclass(frozen=True)
class RecordFacts:
    """What a kernel's code-object record says that a binary need not hold (a cubin holds
    neither): its arguments' ABI names, in order, and the dynamic shared bytes its launch
    passes. ``arg_names`` () leaves a binary's own names."""

    arg_names: tuple[str, ...] = ()
    dynamic_shared_bytes: int = 0


def record_facts(spec: KernelSpec | None) -> RecordFacts:
    """The ``RecordFacts`` of ``spec``'s wgrad kernel, or of the stage-2 kernel (None)."""
    from wgradcache.model.spec import dynamic_lds_bytes

    if spec is None:
        return RecordFacts(arg_names(STAGE2_ARGS), 0)
    return RecordFacts(arg_names(WGRAD_ARGS), dynamic_lds_bytes(spec))


def kernarg_layout(args: tuple[AbiArg, ...]) -> tuple[tuple[str, int, int], ...]:
    """(name, byte offset, size) per argument: each aligned to its own size, in order, as
    the AMDGPU backend lays out the explicit kernarg segment."""
    out, off = [], 0
    for a in args:
        off = -(-off // a.size) * a.size
        out.append((a.name, off, a.size))
        off += a.size
    return tuple(out)


def binary_layout(args: tuple[AbiArg, ...], target: str) -> tuple[tuple[str, int, int], ...]:
    """``kernarg_layout`` as a code object of ``target`` names it: a cubin's parameters
    carry no names (``param<i>`` by ordinal), an AMD code object's metadata has the ABI's."""
    from wgradcache.model.backends import backend_of

    layout = kernarg_layout(args)
    if not backend_of(target).names_kernel_args:
        return tuple((f"param{i}", off, size) for i, (_, off, size) in enumerate(layout))
    return layout


def kernarg_size(args: tuple[AbiArg, ...]) -> int:
    """Bytes of the explicit segment, rounded up to 8 (hidden arguments follow aligned)."""
    name, off, size = kernarg_layout(args)[-1]
    return -(-(off + size) // 8) * 8


def check_values(args: tuple[AbiArg, ...], values: dict[str, int]) -> None:
    """ValueError naming every missing or extra key and any value out of its type's range."""
    names = arg_names(args)
    missing = [n for n in names if n not in values]
    extra = sorted(set(values) - set(names))
    if missing or extra:
        raise ValueError(f"kernel arguments: missing {missing}, unexpected {extra}")
    for a in args:
        v = values[a.name]
        if not isinstance(v, int) or isinstance(v, bool):
            raise ValueError(f"kernel argument {a.name} must be an int, got {v!r}")
        lo, hi = {"ptr": (0, 2 ** 64 - 1), "u32": (0, 2 ** 32 - 1),
                  "i32": (-(2 ** 31), 2 ** 31 - 1)}[a.kind]
        if not lo <= v <= hi:
            raise ValueError(f"kernel argument {a.name}={v} out of {a.kind} range")


def pack(args: tuple[AbiArg, ...], values: dict[str, int]) -> bytes:
    """The explicit kernarg bytes (little endian) for a HIP launch; pointers are addresses."""
    check_values(args, values)
    buf = bytearray(kernarg_size(args))
    fmt = {"ptr": "<Q", "u32": "<I", "i32": "<i"}
    for a, (_, off, _size) in zip(args, kernarg_layout(args), strict=True):
        struct.pack_into(fmt[a.kind], buf, off, values[a.name])
    return bytes(buf)


# ---- values of one launch --------------------------------------------------------------

def magic_u31(d: int) -> tuple[int, int]:
    """(m, s) with x // d == (x * m) >> s for every 0 <= x < 2^31, m < 2^32.

    m = ceil(2^(31+l) / d) with l = ceil(log2 d): the rounding excess e = m·d − 2^(31+l) is
    below d <= 2^l, so x·e / 2^(31+l) < 1/d never carries the quotient (Granlund and
    Montgomery's round-up method). The kernel forms the 64-bit product: a multiply-high and
    a shift instead of a ~30-instruction udiv per decomposed index.
    """
    if not 1 <= d < 2 ** 31:
        raise ValueError(f"magic division by {d}: divisor out of range")
    shift = 31 + (d - 1).bit_length()
    return -(-(1 << shift) // d), shift


def buffer_bytes(problem: ConvProblem, dtype: str, dw_dtype: str,
                 ws_replicas: int = 0) -> dict[str, int]:
    """Bytes of each buffer of a launch (the range the kernel's checks compare against)."""
    eb, ebw, p = elem_bytes(dtype), elem_bytes(dw_dtype), problem
    return {
        "dy": p.N * p.Ho * p.Wo * p.K * eb,
        "x": p.N * p.H * p.W * p.C * eb,
        "dw": p.K * p.Y * p.X * p.cpg * ebw,
        "ws": p.groups * ws_replicas * p.wg_M * p.wg_N * 4,
    }


def wgrad_values(problem: ConvProblem, spec: KernelSpec, *, degree: int, slice_k: int,
                 pointers: dict[str, int] | None = None) -> dict[str, int]:
    """Every WGRAD_ARGS value of a launch. ``pointers`` maps buffer -> device address (a HIP
    launch); without it the pointer arguments are 0 (the emulator binds buffers by name)."""
    p = problem
    sizes = buffer_bytes(p, spec.dtype, spec.dw_dtype,
                         spec.ws_replicas if spec.reduction == "two_stage" else 0)
    ptrs = pointers or {}
    vals = {a.name: int(ptrs.get(a.buffer, 0)) for a in WGRAD_ARGS if a.kind == "ptr"}
    vals.update({f"{b}_bytes": n for b, n in sizes.items()})
    vals.update(N=p.N, H=p.H, W=p.W, C=p.C, K=p.K, Y=p.Y, X=p.X, Ho=p.Ho, Wo=p.Wo,
                stride=p.stride, pad=p.pad, dilation=p.dilation, groups=p.groups,
                kpg=p.kpg, cpg=p.cpg, wg_M=p.wg_M, wg_N=p.wg_N, wg_K=p.wg_K,
                HoWo=p.Ho * p.Wo, Xcpg=p.X * p.cpg, ks=slice_k, ks_count=degree)
    for name in ("HoWo", "Wo", "Xcpg", "cpg"):
        vals[f"mag_{name}"], vals[f"shr_{name}"] = magic_u31(vals[name])
    check_values(WGRAD_ARGS, vals)
    return vals


def stage2_values(problem: ConvProblem, dw_dtype: str, ws_replicas: int,
                  pointers: dict[str, int] | None = None) -> dict[str, int]:
    p = problem
    sizes = buffer_bytes(p, "fp16", dw_dtype, ws_replicas)
    ptrs = pointers or {}
    slab = p.wg_M * p.wg_N
    vals = {"ws_ptr": int(ptrs.get("ws", 0)), "dw_ptr": int(ptrs.get("dw", 0)),
            "ws_bytes": sizes["ws"], "dw_bytes": sizes["dw"], "groups": p.groups,
            "slab_elems": slab, "total_elems": p.groups * slab}
    check_values(STAGE2_ARGS, vals)
    return vals


# ---- the generator's view ----------------------------------------------------------------

_IR_SCALAR = {"fp16": "f16", "bf16": "bf16", "fp32": "f32"}


def pointer_dtypes(dtype: str, dw_dtype: str) -> dict[str, str]:
    """Element type (IR scalar name) of each buffer."""
    return {"dy": _IR_SCALAR[dtype], "x": _IR_SCALAR[dtype], "dw": _IR_SCALAR[dw_dtype],
            "ws": "f32"}


def ir_args(args: tuple[AbiArg, ...], dtype: str, dw_dtype: str) -> tuple:
    """The IR's KernelArg tuple for ``args`` (pointer element types from the dtypes)."""
    from wgradcache.kernel import ir

    elems = pointer_dtypes(dtype, dw_dtype)
    out = []
    for a in args:
        if a.kind == "ptr":
            # dY/X are never written and dW/ws are reached through their own pointer only
            out.append(ir.KernelArg(a.name, ir.ptr(ir.DType(elems[a.buffer]), ir.GLOBAL),
                                    noalias=True, readonly=a.readonly, align=16))
        else:
            out.append(ir.KernelArg(a.name, ir.i32, noalias=False, readonly=False, align=0))
    return tuple(out)


def declare(kb, args: tuple[AbiArg, ...], dtype: str, dw_dtype: str) -> dict:
    """Declare ``args`` on a KernelBuilder, in ABI order; returns name -> argument Value."""
    return {a.name: kb.arg(a.name, ka.dtype, noalias=ka.noalias, readonly=ka.readonly,
                           align=ka.align or 16)
            for a, ka in zip(args, ir_args(args, dtype, dw_dtype), strict=True)}
