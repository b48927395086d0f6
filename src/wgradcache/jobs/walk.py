"""The walk (geometries.yaml -> KernelSpecs) and its closed-form count.

Per target and dtype (DESIGN §6): every ladder geometry the target keeps gets
sync x default x {none, atomic}; every cover geometry also gets sync x cshuffle x
{none, atomic}, two-stage where admitted, and the async loop next to every non-two-stage
configuration where the target has async copies. Each configuration ("slot") is crossed
with the width pairs its loop takes, and each job with the CTA orders its geometry gets
(``spec.cta_groups_for``: row-major, and the job data's grouped orders on its wide tiles)
and the LDS stage counts its configuration gets (``spec.stages_for``: 2, and on the async
loop of the wide tiles the job data's deeper rings that fit).
Then each ``depthwise`` entry of the job data gets depthwise x default x {none, atomic,
two-stage} where ``validate`` admits it on the target under its budgets
(``depthwise_jobs``: the few specs walk yields and count counts, the same function), and
each ``small_c`` entry small_c x default x {none, atomic} alike (``small_c_jobs``).

``walk`` and ``count`` share the slot list and the predicates of ``spec.py`` and nothing
else: ``count`` multiplies, ``walk`` builds specs. No hidden pruning, so the two agree by
construction and by test.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from wgradcache.jobs.geometries import JobData, default_jobdata
from wgradcache.model.spec import (
    DEFAULT_WS_REPLICAS,
    DEPTHWISE,
    DEPTHWISE_VARIANTS,
    DTYPE_KEYS,
    SMALL_C,
    SMALL_C_VARIANTS,
    VARIANT_KEYS,
    KernelSpec,
    Limits,
    LoadWidths,
    Tile,
    cta_groups_for,
    geometry_fits,
    k_loop_admitted,
    lds_fits,
    load_widths_ok,
    loads_fit,
    parse_dtype_key,
    reduction_admitted,
    stages_for,
    store_vector_ok,
    validate,
)
from wgradcache.model.targets import Target, get_target, kernel_target_names

__all__ = ["walk", "count", "depthwise_jobs", "small_c_jobs", "direct_jobs", "count_table",
           "resolve_selection", "Selection", "SelectionError", "LADDER_VARIANTS"]

_LADDER_SLOTS = (("sync", "default", "none"), ("sync", "default", "atomic"))
_COVER_SLOTS = (("sync", "cshuffle", "none"), ("sync", "cshuffle", "atomic"),
                ("sync", "default", "two_stage"))
_ASYNC_SLOTS = tuple(("async", e, r) for e in ("default", "cshuffle") for r in ("none", "atomic"))
# What every ladder geometry gets, in the cover or not (``jobs.cover``: what a cache walked
# with another cover still serves).
LADDER_VARIANTS = frozenset(".".join(s) for s in _LADDER_SLOTS)


class SelectionError(ValueError):
    """Unknown target, dtype or variant: one line listing the valid ones."""


@dataclass(frozen=True)
class Selection:
    targets: tuple[str, ...]
    dtypes: tuple[str, ...]
    variants: tuple[str, ...]


def resolve_selection(targets: Iterable[str] = (), dtypes: Iterable[str] = (),
                      variants: Iterable[str] = (), data: JobData | None = None) -> Selection:
    """Defaults: every target with kernels, the file's default dtypes, every variant."""
    from wgradcache.model.targets import target_names

    data = data or default_jobdata()
    targets, dtypes, variants = tuple(targets), tuple(dtypes), tuple(variants)
    for kind, given, valid in (("target", targets, tuple(target_names())),
                               ("dtype", dtypes, DTYPE_KEYS),
                               ("variant", variants, VARIANT_KEYS)):
        bad = [g for g in given if g not in valid]
        if bad:
            raise SelectionError(f"unknown {kind} {bad[0]!r}; valid: {', '.join(valid)}")
    return Selection(targets=targets or tuple(kernel_target_names()),
                     dtypes=dtypes or data.default_dtypes,
                     variants=variants or VARIANT_KEYS)


def _slots(tile: Tile, dw_dtype: str, in_cover: bool, variants: tuple[str, ...]
           ) -> Iterator[tuple[str, str, str]]:
    slots = _LADDER_SLOTS + (_COVER_SLOTS + _ASYNC_SLOTS if in_cover else ())
    for k_loop, epilogue, reduction in slots:
        if f"{k_loop}.{epilogue}.{reduction}" not in variants:
            continue
        if not (k_loop_admitted(tile.target, k_loop)[0]
                and reduction_admitted(tile.target, dw_dtype, reduction, epilogue)[0]
                and lds_fits(tile, k_loop, epilogue)[0]):
            continue
        yield k_loop, epilogue, reduction


def _pairs(data: JobData, tile: Tile, k_loop: str, epilogue: str, reduction: str
           ) -> list[LoadWidths]:
    pairs = data.vec_pairs if k_loop == "sync" else data.async_chunk_pairs
    limits = data.limits_for(tile.target.name)
    tm, tn = tile.geometry[:2]
    widths = (LoadWidths(k_loop, a, b) for a, b in pairs)
    return [w for w in widths
            if load_widths_ok(w, tile.dtype, tm, tn)[0]
            and loads_fit(tile, w, limits)[0]
            and store_vector_ok(epilogue, reduction, w.elements(tile.dtype)[1])[0]]


def _geometries(data: JobData, target: Target, dtype: str) -> Iterator[tuple[Tile, bool]]:
    cover = data.cover_for(target.name)
    for g in data.ladder_geometries(target.name):
        tile = Tile(target, dtype, g)
        if geometry_fits(tile, data.limits_for(target.name))[0]:
            yield tile, g in cover


def _direct_specs(target: Target, dtype: str, dw_dtype: str, variants: tuple[str, ...],
                  k_loop: str, kernel_variants: tuple[str, ...], limits: Limits,
                  **fields: int) -> Iterator[KernelSpec]:
    """One direct kernel entry x its variants: the specs ``validate`` admits under the
    target's budgets (two-stage with the default workspace replicas). ``fields``: its tile
    and vec fields; warp_m follows from the block (a whole number of waves or validate
    refuses it)."""
    lanes = fields["tile_n"] // fields["vec_a"]
    for v in kernel_variants:
        if v not in variants:
            continue
        reduction = v.rsplit(".", 1)[1]
        spec = KernelSpec(target=target.name, dtype=dtype, dw_dtype=dw_dtype,
                          warp_m=lanes * fields["tile_k"] // target.wave_size, warp_n=1,
                          k_loop=k_loop, reduction=reduction,
                          ws_replicas=DEFAULT_WS_REPLICAS if reduction == "two_stage" else 0,
                          **fields)
        if validate(spec, limits=limits, target=target)[0]:
            yield spec


def depthwise_jobs(data: JobData, target: Target, dtype: str, dw_dtype: str,
                   variants: tuple[str, ...]) -> Iterator[KernelSpec]:
    """The depthwise kernels of one target and dtype: every ``data.depthwise`` entry
    [T, tile_n, tile_k, vec, wo_run] x {none, atomic, two-stage} that ``validate`` admits
    under the target's budgets (a block that is no whole number of waves, too many
    accumulators, an atomic the target lacks: left out, as every ladder filter leaves a
    geometry out)."""
    limits = data.limits_for(target.name)
    for taps, tile_n, tile_k, vec, run in data.depthwise:
        yield from _direct_specs(target, dtype, dw_dtype, variants, DEPTHWISE,
                                 DEPTHWISE_VARIANTS, limits, tile_m=taps, tile_n=tile_n,
                                 tile_k=tile_k, vec_a=vec, vec_b=vec, wo_run=run)


def small_c_jobs(data: JobData, target: Target, dtype: str, dw_dtype: str,
                 variants: tuple[str, ...]) -> Iterator[KernelSpec]:
    """The small-C kernels of one target and dtype: every ``data.small_c`` entry
    [T, C, tile_n, tile_k, vec] (vec_b = C, the compiled channels; vec_a = vec, the dY
    vector) x {none, atomic} that ``validate`` admits, as ``depthwise_jobs``."""
    limits = data.limits_for(target.name)
    for taps, chans, tile_n, tile_k, vec in data.small_c:
        yield from _direct_specs(target, dtype, dw_dtype, variants, SMALL_C,
                                 SMALL_C_VARIANTS, limits, tile_m=taps, tile_n=tile_n,
                                 tile_k=tile_k, vec_a=vec, vec_b=chans)


def direct_jobs(data: JobData, target: Target, dtype: str, dw_dtype: str,
                variants: tuple[str, ...]) -> Iterator[KernelSpec]:
    """Every direct kernel of one target and dtype: depthwise, then small-C (what walk
    yields after the GEMM jobs and count counts one by one)."""
    yield from depthwise_jobs(data, target, dtype, dw_dtype, variants)
    yield from small_c_jobs(data, target, dtype, dw_dtype, variants)


def walk(target: str, dtypes: Iterable[str] | None = None,
         variants: Iterable[str] | None = None, data: JobData | None = None
         ) -> Iterator[KernelSpec]:
    """Every job of one target, in a fixed order (geometry, slot, widths, CTA order,
    stages)."""
    data = data or default_jobdata()
    t = get_target(target)
    if not t.has_kernels:
        return
    variants = tuple(variants) if variants else VARIANT_KEYS
    limits = data.limits_for(target)
    for key in (tuple(dtypes) if dtypes else data.default_dtypes):
        dtype, dw = parse_dtype_key(key)
        for tile, in_cover in _geometries(data, t, dtype):
            tm, tn, tk, wm, wn = tile.geometry
            orders = cta_groups_for(tile.geometry, limits)
            for k_loop, epi, red in _slots(tile, dw, in_cover, variants):
                rings = stages_for(tile, k_loop, epi, limits)
                for widths in _pairs(data, tile, k_loop, epi, red):
                    for order in orders:
                        for ring in rings:
                            yield KernelSpec(
                                target=target, dtype=dtype, dw_dtype=dw, tile_m=tm,
                                tile_n=tn, tile_k=tk, warp_m=wm, warp_n=wn, k_loop=k_loop,
                                epilogue=epi, reduction=red,
                                ws_replicas=data.ws_replicas if red == "two_stage" else 0,
                                cta_group=order, stages=ring, **widths.spec_fields())
        yield from direct_jobs(data, t, dtype, dw, variants)


def count(target: str, dtypes: Iterable[str] | None = None,
          variants: Iterable[str] | None = None, data: JobData | None = None
          ) -> dict[str, dict[str, int]]:
    """Jobs per dtype per variant key, computed per geometry without building specs."""
    data = data or default_jobdata()
    t = get_target(target)
    variants = tuple(variants) if variants else VARIANT_KEYS
    limits = data.limits_for(target)
    out: dict[str, dict[str, int]] = {}
    for key in (tuple(dtypes) if dtypes else data.default_dtypes):
        per_variant: dict[str, int] = {}
        if t.has_kernels:
            dtype, dw = parse_dtype_key(key)
            for tile, in_cover in _geometries(data, t, dtype):
                orders = len(cta_groups_for(tile.geometry, limits))
                for k_loop, epi, red in _slots(tile, dw, in_cover, variants):
                    rings = len(stages_for(tile, k_loop, epi, limits))
                    n = len(_pairs(data, tile, k_loop, epi, red)) * orders * rings
                    if n:
                        v = f"{k_loop}.{epi}.{red}"
                        per_variant[v] = per_variant.get(v, 0) + n
            for s in direct_jobs(data, t, dtype, dw, variants):
                per_variant[s.variant] = per_variant.get(s.variant, 0) + 1
        out[key] = {v: per_variant[v] for v in VARIANT_KEYS if v in per_variant}
    return out


def count_table(selection: Selection, data: JobData | None = None,
                by_walk: bool = False) -> dict:
    """The ``count --json`` document: totals per target, dtype and variant."""
    data = data or default_jobdata()
    doc: dict = {"total": 0, "targets": {}}
    for target in selection.targets:
        if by_walk:
            per: dict[str, dict[str, int]] = {d: {} for d in selection.dtypes}
            for s in walk(target, selection.dtypes, selection.variants, data):
                bucket = per[s.dtype_key]
                bucket[s.variant] = bucket.get(s.variant, 0) + 1
            per = {d: {v: n[v] for v in VARIANT_KEYS if v in n} for d, n in per.items()}
        else:
            per = count(target, selection.dtypes, selection.variants, data)
        tdoc = {"total": 0, "dtypes": {}}
        for d, variants in per.items():
            dtotal = sum(variants.values())
            tdoc["dtypes"][d] = {"total": dtotal, "variants": variants}
            tdoc["total"] += dtotal
        doc["targets"][target] = tdoc
        doc["total"] += tdoc["total"]
    return doc
