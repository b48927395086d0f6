"""``verify``'s numerics level: which problems and split degrees each entry runs, and the
launch (the emulator, or the stored blob on a device) against the float64 reference.

Reproduce has proven, before anything here runs, that each entry's IR compiles to its
stored blob, so what the emulator runs is the stored binary's IR. An unsplit kernel runs
``probe_problem`` (or each ``--problem`` it serves) once; a split-K kernel ``split_probe``
at the policy's degree, ``EXPLICIT_DEGREES`` and one past its K tiles (``split_degrees``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from wgradcache.model.spec import KernelSpec, elem_bytes, is_depthwise, is_small_c

__all__ = ["EXPLICIT_DEGREES", "NumericsRun", "NumericsResult", "probe_problem",
           "split_probe", "split_degrees", "launcher", "run_entry"]

# Split degrees every split-K entry runs besides the policy's (and one past its K tiles):
# unsplit through a slice count that does not divide the K tiles.
EXPLICIT_DEGREES = (1, 2, 3, 7)


@dataclass(frozen=True)
class NumericsRun:
    """One launch of an entry: the problem, the split degree, whether the policy chose it."""

    problem: str
    degree: int
    policy: bool
    passed: bool

    def to_json(self) -> dict:
        return {"problem": self.problem, "degree": self.degree, "policy": self.policy,
                "passed": self.passed}


@dataclass(frozen=True)
class NumericsResult:
    """An entry's numerics: ``status`` is "passed", "failed" or "not_covered" (no given
    problem serves it, so nothing ran)."""

    key: str
    label: str
    status: str
    runs: tuple[NumericsRun, ...] = ()

    @property
    def degrees(self) -> tuple[int, ...]:
        return tuple(sorted({r.degree for r in self.runs}))

    def describe(self) -> str:
        """'P at split 2 (policy), 1, 3, 7, 35' per problem; what text and JUnit show."""
        if self.status == "not_covered":
            return "not covered: serves none of the given problems"
        if not self.runs:
            return "nothing ran"
        parts = []
        for problem in dict.fromkeys(r.problem for r in self.runs):
            ds = [f"{r.degree} (policy)" if r.policy else str(r.degree)
                  for r in self.runs if r.problem == problem]
            parts.append(f"{problem} at split {', '.join(ds)}")
        return "; ".join(parts)

    def to_json(self) -> dict:
        return {"key": self.key, "label": self.label, "status": self.status,
                "degrees": list(self.degrees), "runs": [r.to_json() for r in self.runs]}


def probe_problem(spec: KernelSpec):
    """A small problem the spec serves that still hits its edges: a partial M tile
    (kpg 24 < tile_m), padding, a 3x3 filter and a reduction tail (N·Ho·Wo = 98)."""
    from wgradcache.model.problem import ConvProblem

    if is_depthwise(spec):
        return _depthwise_probe(spec, 1)
    if is_small_c(spec):
        return _small_c_probe(spec, 1)
    cpg = 16
    return ConvProblem(N=2, C=cpg, H=7, W=7, K=24, Y=3, X=3, stride=1, pad=1, dilation=1,
                       groups=1)


def split_probe(spec: KernelSpec):
    """The problem a split-K entry runs: K long enough that the policy splits it (wg_K =
    N·Ho·Wo >= 2·MIN_SLICE_K, so degree 2), not a multiple of tile_k (a tail tile), and the
    probe's other edges: a partial M tile, padding, a 3x3 filter. Channels are the spec's own
    load widths (two B vectors per tap, wg_N even for packed atomics), so every walked spec
    serves it; ~0.1-0.3 s per emulated run."""
    from wgradcache.model.problem import ConvProblem
    from wgradcache.wgrad.split_k import MIN_SLICE_K

    if is_depthwise(spec):
        return _depthwise_probe(spec, 2 * MIN_SLICE_K)
    if is_small_c(spec):
        return _small_c_probe(spec, 2 * MIN_SLICE_K)
    hw = 1
    while 2 * hw * hw < 2 * MIN_SLICE_K or (2 * hw * hw) % spec.tile_k == 0:
        hw += 1  # Ho = Wo = hw (3x3, pad 1)
    eb = elem_bytes(spec.dtype)
    a, b = ((spec.chunk_a // eb, spec.chunk_b // eb) if spec.k_loop == "async"
            else (spec.vec_a, spec.vec_b))
    kpg = (spec.tile_m - 1) // a * a or a  # the largest multiple of a below tile_m
    return ConvProblem(N=2, C=2 * b, H=hw, W=hw, K=kpg, Y=3, X=3, stride=1, pad=1,
                       dilation=1, groups=1)


def _depthwise_probe(spec: KernelSpec, min_k: int):
    """A depthwise problem (groups = C = K) that a depthwise spec serves: a partial last
    channel block (C = tile_n + 2·vec, even: dword pairs of dW; tile_n + vec where 2·vec
    fills a block, as 8-channel vectors do 16-channel ones), padding, the spec's filter
    up to 3x3, batch 1, and N·Ho·Wo = hw² at least 49 and ``min_k``, with a tail of its CTA
    step (``k_step``) where the step has one (Ho = Wo = hw, a multiple of its run of output
    columns)."""
    from wgradcache.model.problem import ConvProblem

    hw = 7
    while (hw * hw < min_k or hw % spec.wo_run
           or (spec.k_step > 1 and hw * hw % spec.k_step == 0)):
        hw += 1
    c = spec.tile_n + 2 * spec.vec_b
    if c % spec.tile_n == 0:
        c = spec.tile_n + spec.vec_b
    side = min(3, spec.tile_m)
    return ConvProblem(N=1, C=c, H=hw, W=hw, K=c, Y=side, X=side, stride=1, pad=side // 2,
                       dilation=1, groups=c)


def _small_c_probe(spec: KernelSpec, min_k: int):
    """A small-C problem (groups = 1) that a small-C spec serves: C one below its compiled
    channels where it has more than one (the channel past C read and never stored), a
    partial last K block (K = tile_n + 2·vec_a, even: dword pairs of dW), the spec's filter
    up to 3x3 with stride 2 (a stem's) and padding, batch 1, and N·Ho·Wo = hw² at least 49
    and ``min_k``, with a tail of its CTA step where the step has one (Ho = Wo = hw)."""
    from wgradcache.model.problem import ConvProblem

    hw = 7
    while hw * hw < min_k or (spec.tile_k > 1 and hw * hw % spec.tile_k == 0):
        hw += 1
    side = min(3, spec.tile_m)
    pad = side // 2
    h = 2 * hw - 1 + side - 1 - 2 * pad  # stride 2: Ho = (h + 2·pad − side) // 2 + 1 = hw
    return ConvProblem(N=1, C=max(1, spec.vec_b - 1), H=h, W=h, K=spec.tile_n + 2 * spec.vec_a,
                       Y=side, X=side, stride=2, pad=pad, dilation=1, groups=1)


def split_degrees(spec: KernelSpec, problem, resident: int | None = None
                  ) -> list[tuple[int, bool]]:
    """(degree, chosen by the policy) for each launch of ``spec`` on ``problem``, the policy's
    first: unsplit kernels run degree 1; split-K ones also ``EXPLICIT_DEGREES`` and one past
    the K tiles, each where ``serves`` admits it. A degree equal to the policy's is one
    launch (the plan is a function of the degree), so it runs once. ``resident``: the
    entry's CTAs per CU (``Backend.resident_ctas``), so the policy's degree is the one select
    and ``serve`` launch (None: the split rule's default residency)."""
    from wgradcache.wgrad.capability import serves
    from wgradcache.wgrad.split_k import plan_split_k

    policy = plan_split_k(spec, problem, resident_ctas=resident).degree
    out = [(policy, True)]
    if spec.reduction == "none":
        return out
    k_tiles = -(-problem.wg_K // spec.tile_k)
    for d in (*EXPLICIT_DEGREES, k_tiles + 1):
        if all(d != seen for seen, _ in out) and serves(spec, problem, d)[0]:
            out.append((d, False))
    return out


def launcher(cache, dev, row, seed: int) -> Callable:
    """``(problem, split_k) -> report``: the stored blob (+ its stage-2 companion) on the
    device, else the emulator. ``row``: a verified entry (verify's ``_Row``: its ``spec``,
    its ``entry``, whose symbol the blob holds, and the blob's bytes ``data``)."""
    from wgradcache.pipeline.emulate import run_emulated

    spec = row.spec
    if dev is None:
        return lambda p, d: run_emulated(spec, p, split_k=d, seed=seed)
    from wgradcache.runtime.launch import CodeObject, StoredKernel, run_on_device, stage2_code
    from wgradcache.wgrad.kernel import kernel_symbol

    s2 = (stage2_code(cache, spec.dw_dtype, spec.ws_replicas)
          if spec.reduction == "two_stage" else None)
    kernel = StoredKernel(spec, CodeObject(row.data, row.entry.symbol or kernel_symbol(spec)), s2)
    return lambda p, d: run_on_device(dev, kernel, p, split_k=d, seed=seed)


def run_entry(launch: Callable, spec: KernelSpec, cases: list, resident: int | None = None
              ) -> tuple[list[NumericsRun], list[str]]:
    """Every (problem, degree) launch of one entry: the runs and the failed ones' reasons.
    The policy's launch goes through the launcher's own split rule (degree None) unless
    ``resident`` moves the policy off the default residency: then its degree is given."""
    runs: list[NumericsRun] = []
    bad: list[str] = []
    for p in cases:
        for degree, policy in split_degrees(spec, p, resident):
            try:
                r = launch(p, None if policy and resident is None else degree)
            except Exception as e:  # a kernel that broke the emulator
                bad.append(f"{p.short()} at split {degree}: {type(e).__name__}: {e}")
                runs.append(NumericsRun(p.short(), degree, policy, False))
                continue
            runs.append(NumericsRun(p.short(), degree, policy, r.passed))
            if not r.passed:
                bad.append(r.summary())
    return runs, bad
