"""Host side of one wgrad launch on a device: what ``verify --device hip|cuda`` runs (HIP
through ``runtime/hip.py``, CUDA through ``runtime/cuda.py``: the same session surface).

The launch contract is the emulator run's (``pipeline/emulate.py``), step for step, so device and
emulator are judged the same way:

* ``serves`` first, then the split plan of ``split_k.plan_split_k`` (grid =
  (N tiles, M tiles, groups · degree), the slice width and degree are kernel arguments);
* dW zeroed (hipMemset) before an atomic split-K launch, the f32 workspace zeroed before
  stage 1 of a two-stage one; a dW nothing zeroes starts as NaN (``poison``) so an
  element the kernel forgets to write cannot pass as a correct zero;
* kernel arguments packed by ``wgrad/abi.py`` (``wgrad_values`` / ``stage2_values`` with
  the device addresses, ``pack``), after checking that the code object's own metadata lays
  its explicit arguments out exactly as ``kernarg_layout`` does: the runtime reads each
  argument at the metadata's offset, so a drift would be silent garbage, not an error;
* two-stage: stage 2 (the companion code object cached as ``stage2/<dw>-wsr<R>``) runs
  after stage 1 on the same stream, then dW is read back;
* the same seeded inputs (``make_inputs``), float64 reference, error bound and
  peak-normalised error as ``run_emulated``.

Tested here only against the host-memory fake HIP of tests/runtime, which decodes the
kernarg bytes by the code object's metadata and runs the emulator on the kernel named by
the symbol; never run on a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wgradcache.model.backends import backend_of
from wgradcache.model.problem import ConvProblem
from wgradcache.model.spec import KernelSpec, dynamic_lds_bytes
from wgradcache.numerics.error_model import peak_normalised_error
from wgradcache.numerics.run import EmulationReport, from_storage, prepare_run, to_storage
from wgradcache.runtime import LaunchDims
from wgradcache.runtime.cuda import CudaDevice, CudaError, CudaSession
from wgradcache.runtime.hip import HipDevice, HipError, HipSession
from wgradcache.wgrad.abi import (
    STAGE2_ARGS,
    STAGE2_BLOCK,
    WGRAD_ARGS,
    AbiArg,
    binary_layout,
    buffer_bytes,
    kernarg_layout,
    pack,
    stage2_values,
    wgrad_values,
)
from wgradcache.wgrad.split_k import SplitPlan
from wgradcache.wgrad.stage2 import stage2_grid

__all__ = ["CodeObject", "StoredKernel", "WgradLaunch", "DeviceReport", "stage2_code",
           "check_code_object", "launch_wgrad", "run_on_device", "session_for",
           "PreparedLaunch", "prepare_launch", "device_buffers"]


@dataclass(frozen=True)
class CodeObject:
    """A stored code object (the cache blob's bytes) and its kernel symbol."""

    hsaco: bytes
    symbol: str


@dataclass(frozen=True)
class StoredKernel:
    """A spec's stored code object and, for a two-stage entry, its stage-2 companion
    (``stage2_code``): what every launch of the spec loads."""

    spec: KernelSpec
    code: CodeObject
    stage2: CodeObject | None = None


@dataclass(frozen=True)
class WgradLaunch:
    """One launch: which stored kernel, on which problem, split how (``plan_split_k``)."""

    kernel: StoredKernel
    problem: ConvProblem
    plan: SplitPlan


DeviceReport = EmulationReport  # one shape for both: judged the same way


def stage2_code(cache, dw_dtype: str, replicas: int) -> CodeObject:
    """The stage-2 companion of the two-stage entries with (``dw_dtype``, R) in ``cache``
    (a ``TargetCache``); ValueError naming what is missing."""
    from wgradcache.cache.store import CorruptEntry, stage2_name

    name = stage2_name(dw_dtype, replicas)
    try:
        entry = cache.read_stage2(name)
    except CorruptEntry as e:
        raise ValueError(f"no usable stage-2 kernel {name} in the {cache.target} cache: "
                         f"{e}") from None
    if entry is None or not entry.blob or not entry.symbol:
        raise ValueError(f"no usable stage-2 kernel {name} in the {cache.target} cache")
    try:
        data = cache.read_blob(entry.blob)
    except FileNotFoundError:
        raise ValueError(f"stage-2 kernel {name}: blob {entry.blob[:16]} is missing") from None
    return CodeObject(data, entry.symbol)


def check_code_object(code: CodeObject, target: str, args: tuple[AbiArg, ...],
                      block: int) -> None:
    """ValueError unless the code object (one of ``target``'s backend's) holds
    ``code.symbol``, lays its explicit arguments out as ``kernarg_layout(args)`` (named as
    the backend's binaries name them, ``abi.binary_layout``) and admits ``block`` threads."""
    co = backend_of(target).read_code_object(code.hsaco)
    if co.symbol != code.symbol:
        raise ValueError(f"code object's kernel is {co.symbol}, not {code.symbol}")
    have = tuple((a.name, a.offset, a.size) for a in co.explicit_args)
    want = binary_layout(args, target)
    if have != want:
        diff = [f"{w} vs {h}" for w, h in zip(want, have, strict=False) if w != h]
        raise ValueError(f"{code.symbol}: explicit kernel arguments differ from the ABI "
                         f"({len(have)} vs {len(want)}; first: {diff[:1] or 'count'})")
    if co.max_threads and block > co.max_threads:
        raise ValueError(f"{code.symbol}: block {block} > {co.THREADS_WORD} "
                         f"{co.max_threads}")


def _offsets(args: tuple[AbiArg, ...]) -> tuple[int, ...]:
    return tuple(off for _, off, _ in kernarg_layout(args))


def session_for(device: HipDevice | CudaDevice):
    """The session class of a device: CUDA for ``CudaDevice``, else HIP."""
    return CudaSession(device) if isinstance(device, CudaDevice) else HipSession(device)


@dataclass
class PreparedLaunch:
    """One launch of a stored kernel on buffers already on the device, with its contract:
    ``run()`` zeroes dW before an atomic split-K launch and the workspace before stage 1 of
    a two-stage one, launches stage 1, then stage 2 after it on the same stream. What
    ``launch_wgrad`` runs once and ``pipeline/tune.py`` runs and times again and again."""

    session: object
    spec: KernelSpec
    plan: SplitPlan
    ptr: dict[str, int]
    sizes: dict[str, int]
    k1: object
    args1: bytes
    k2: object = None
    args2: bytes = b""
    grid2: tuple[int, int, int] = (1, 1, 1)

    def run(self) -> None:
        s, spec, plan, ptr = self.session, self.spec, self.plan, self.ptr
        if plan.reduction == "atomic":
            s.memset(ptr["dw"], 0, self.sizes["dw"])  # the atomics add into it
        if plan.reduction == "two_stage":
            s.memset(ptr["ws"], 0, self.sizes["ws"])  # stage 1's atomics add into it
        s.launch(self.k1, LaunchDims(plan.grid, spec.block_size, dynamic_lds_bytes(spec)),
                 self.args1, offsets=_offsets(WGRAD_ARGS))
        if self.k2 is not None:
            s.launch(self.k2, LaunchDims(self.grid2, STAGE2_BLOCK), self.args2,
                     offsets=_offsets(STAGE2_ARGS))


def device_buffers(session, spec: KernelSpec, problem: ConvProblem, plan: SplitPlan
                   ) -> tuple[dict[str, int], dict[str, int]]:
    """(pointers, sizes) of dY, X, dW and (two-stage) the workspace, allocated in
    ``session`` (freed with it)."""
    sizes = buffer_bytes(problem, spec.dtype, spec.dw_dtype, plan.ws_replicas)
    ptr = {b: session.alloc(sizes[b]) for b in ("dy", "x", "dw")}
    ptr["ws"] = session.alloc(sizes["ws"]) if plan.reduction == "two_stage" else 0
    return ptr, sizes


def prepare_launch(session, launch: WgradLaunch, ptr: dict[str, int], sizes: dict[str, int]
                   ) -> PreparedLaunch:
    """Check the code objects against the ABI, load them and pack their arguments for the
    buffers ``ptr`` (``device_buffers``); ValueError naming what does not fit."""
    spec, code, stage2 = launch.kernel.spec, launch.kernel.code, launch.kernel.stage2
    problem, plan = launch.problem, launch.plan
    two_stage = plan.reduction == "two_stage"
    if two_stage and stage2 is None:
        raise ValueError(f"{spec.label()}: a two-stage launch needs the stage-2 kernel")
    check_code_object(code, spec.target, WGRAD_ARGS, spec.block_size)
    if two_stage:
        check_code_object(stage2, spec.target, STAGE2_ARGS, STAGE2_BLOCK)
    vals = wgrad_values(problem, spec, degree=plan.degree, slice_k=plan.slice_k, pointers=ptr)
    if vals["ws_bytes"] != sizes["ws"]:  # R of the spec and of the plan must agree
        raise ValueError(f"workspace {vals['ws_bytes']} B in the arguments, {sizes['ws']} B "
                         "allocated")
    k1 = session.load_kernel(code.hsaco, code.symbol)
    if not two_stage:
        return PreparedLaunch(session, spec, plan, ptr, sizes, k1, pack(WGRAD_ARGS, vals))
    k2 = session.load_kernel(stage2.hsaco, stage2.symbol)
    s2 = stage2_values(problem, spec.dw_dtype, plan.ws_replicas, pointers=ptr)
    return PreparedLaunch(session, spec, plan, ptr, sizes, k1, pack(WGRAD_ARGS, vals), k2,
                          pack(STAGE2_ARGS, s2), stage2_grid(s2["total_elems"]))


def launch_wgrad(session: HipSession | CudaSession, launch: WgradLaunch, x: np.ndarray,
                 dy: np.ndarray, *, poison: bool = True) -> np.ndarray:
    """Run ``launch`` (its plan of its stored kernel) on (X, dY) in their storage format;
    returns dW in its storage format (shape ``problem.dw_shape``).

    ``poison`` fills a dW the contract does not zero with NaN first (verification)."""
    spec, problem, plan = launch.kernel.spec, launch.problem, launch.plan
    if plan.reduction == "two_stage" and launch.kernel.stage2 is None:
        raise ValueError(f"{spec.label()}: a two-stage launch needs the stage-2 kernel")
    sizes = buffer_bytes(problem, spec.dtype, spec.dw_dtype, plan.ws_replicas)
    if x.nbytes != sizes["x"] or dy.nbytes != sizes["dy"]:
        raise ValueError(f"inputs of {x.nbytes}/{dy.nbytes} B, the problem needs "
                         f"{sizes['x']}/{sizes['dy']} B (X/dY)")
    ptr, sizes = device_buffers(session, spec, problem, plan)
    session.upload(ptr["dy"], dy)
    session.upload(ptr["x"], x)
    if plan.reduction != "atomic" and poison:
        session.upload(ptr["dw"], to_storage(np.full(problem.dw_shape, np.nan), spec.dw_dtype))
    prepare_launch(session, launch, ptr, sizes).run()
    session.synchronize()
    out = to_storage(np.zeros(problem.dw_shape), spec.dw_dtype)
    session.download(ptr["dw"], out)
    return out


def run_on_device(device: HipDevice | CudaDevice, kernel: StoredKernel, problem: ConvProblem,
                  *, split_k: int | None = None, seed: int = 0) -> DeviceReport:
    """Launch ``kernel`` (a spec's stored code objects) on ``problem`` (seeded inputs) and
    compare with float64, as ``wgrad.run.run_emulated`` does in the emulator.

    Raises ValueError when the kernel cannot serve the problem or the split degree, or the
    code object does not match the ABI; a HIP error is a failed report naming it.
    """
    spec = kernel.spec
    plan, x, dy, ref, bound = prepare_run(spec, problem, split_k=split_k, seed=seed)
    failure = ""
    dw = None
    try:
        with session_for(device) as s:
            dw = launch_wgrad(s, WgradLaunch(kernel, problem, plan),
                              to_storage(x, spec.dtype), to_storage(dy, spec.dtype))
    except (HipError, CudaError) as e:
        failure, dw = str(e), None
    out = None if dw is None else from_storage(dw, spec.dw_dtype).reshape(problem.dw_shape)
    error = float("inf") if out is None else peak_normalised_error(out, ref)
    return DeviceReport(label=spec.label(), problem=problem.short(), plan=plan, out=out,
                        ref=ref, error=error, bound=bound,
                        passed=out is not None and error <= bound.bound, fault=failure,
                        where=device.describe())
