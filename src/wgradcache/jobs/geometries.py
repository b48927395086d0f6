"""Load and schema-check geometries.yaml: the ladder, the filters, the cover, the widths.

A bad file must stop every command with one line naming the file, the line and the field
(exit code 2 at the CLI), never a traceback and never a silently different walk. We compose
the YAML to nodes (not plain dicts) so every value keeps its line number.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import yaml

from wgradcache.jobs.yamlsafe import NodeReader
from wgradcache.model.spec import (
    ASYNC_CHUNK_BYTES,
    CTA_GROUP_RANGE,
    DEPTHWISE_TAPS,
    DTYPE_KEYS,
    SMALL_C_CHANNELS,
    STAGE_RANGE,
    VEC_WIDTHS,
    WO_RUNS,
    Geometry,
    Limits,
    LoadWidths,
    Tile,
    geometry_fits,
    load_widths_ok,
)
from wgradcache.model.targets import get_target, kernel_target_names

__all__ = ["GeometryFileError", "CoverEntry", "JobData", "load", "default_path", "default_jobdata"]

_LADDER_AXES = ("tile_m", "tile_n", "tile_k", "warp_m", "warp_n")


class GeometryFileError(ValueError):
    """One-line schema error: ``file:line: field: problem``."""


@dataclass(frozen=True)
class CoverEntry:
    geometry: Geometry
    reason: str
    targets: tuple[str, ...]


@dataclass(frozen=True)
class JobData:
    """geometries.yaml, parsed and checked."""

    path: str
    ladder: dict[str, tuple[int, ...]]
    limits: Limits  # the budgets every target starts from
    vec_pairs: tuple[tuple[int, int], ...]
    async_chunk_pairs: tuple[tuple[int, int], ...]
    ws_replicas: int
    default_dtypes: tuple[str, ...]
    optional_dtypes: tuple[str, ...]
    cover: tuple[CoverEntry, ...]
    target_limits: tuple[tuple[str, Limits], ...] = ()  # per-target overrides, applied
    # per wave size, the ladder its targets walk instead of ``ladder`` (``ladder_wave64``)
    wave_ladders: tuple[tuple[int, dict[str, tuple[int, ...]]], ...] = ()
    # per target, a ladder of its own (``ladder_targets``), before its wave size's
    target_ladders: tuple[tuple[str, dict[str, tuple[int, ...]]], ...] = ()
    # the direct depthwise kernels (``depthwise``): [T, tile_n, tile_k, vec, wo_run] each
    # (a file's four-element entry has wo_run 1)
    depthwise: tuple[tuple[int, int, int, int, int], ...] = ()
    # the direct small-C kernels (``small_c``): [T, C, tile_n, tile_k, vec] each
    small_c: tuple[tuple[int, int, int, int, int], ...] = ()

    def limits_for(self, target: str) -> Limits:
        return dict(self.target_limits).get(target, self.limits)

    def ladder_for(self, target: str) -> dict[str, tuple[int, ...]]:
        """The one rule of which ladder a target walks: its own (``ladder_targets``), else
        its wave size's (``ladder_wave64``), else the shared one."""
        own = dict(self.target_ladders)
        if target in own:
            return own[target]
        return dict(self.wave_ladders).get(get_target(target).wave_size, self.ladder)

    def ladders(self) -> tuple[dict[str, tuple[int, ...]], ...]:
        """Every ladder of the file: the shared one first, then the wave sizes', then the
        targets' own."""
        return (self.ladder, *(lad for _, lad in self.wave_ladders),
                *(lad for _, lad in self.target_ladders))

    def ladder_geometries(self, target: str | None = None) -> list[Geometry]:
        """Every combination of ``target``'s ladder (the shared one when None), in a fixed
        order (before per-target filters)."""
        ladder = self.ladder if target is None else self.ladder_for(target)
        return list(itertools.product(*(ladder[a] for a in _LADDER_AXES)))

    def cover_misfit(self, target: str, geometry: Geometry) -> str:
        """Why ``geometry`` cannot be a cover entry for ``target`` ("" when it can): the
        loader's own rule, for a cover block written from elsewhere (``jobs.cover``)."""
        return _misfit(geometry, target, self)

    def cover_for(self, target: str) -> dict[Geometry, CoverEntry]:
        return {c.geometry: c for c in self.cover if target in c.targets}


# Package data (pyproject's package-data), found beside the package: the repository root is
# not there in an installed wheel, where a root-relative path read site-packages' parent. The
# root geometries.yaml is the file users edit; `make` copies it here and a test compares them.
_SHIPPED_FILE = Path(__file__).resolve().parents[1] / "data" / "geometries.yaml"


def default_path() -> Path:
    """$WGRADCACHE_GEOMETRIES, else the shipped ``wgradcache/data/geometries.yaml``."""
    env = os.environ.get("WGRADCACHE_GEOMETRIES")
    return Path(env) if env else _SHIPPED_FILE


# The documented range of every number in the file (the YAML's comments repeat them; an
# error names the range). They keep a hostile or mistyped file from meaning hours of walk
# or gigabytes of workspace; the real budgets are the filters' values inside them.
TILE_RANGE = (16, 1024)  # tile_m, tile_n, tile_k: the smallest MMA atom edge is 16
WARP_RANGE = (1, 32)  # warp_m, warp_n: 32 waves of 32 lanes fill a 1024-thread block
MAX_AXIS_VALUES = 8  # per ladder axis: at most 8**5 = 32768 ladder geometries
LIMIT_RANGES = {  # filters and their per-target overrides
    "max_acc_per_lane": (1, 1024),  # f32 accumulators, VGPRs: gfx1250 has 1024
    "max_block_size": (1, 1024),  # threads: HIP's largest block
    "min_block_size": (1, 1024),
    "max_k_steps": (1, 64),
    "max_loads_per_thread": (1, 4096),
}
# Replicas of the two-stage workspace: one per split slice at most, and the split degree
# stops at wgrad/split_k.py's MAX_DEGREE (128; a test ties the two).
WS_REPLICAS_RANGE = (1, 128)
MAX_COVER = 256
_VEC_RANGE = (1, max(VEC_WIDTHS))  # the exact set is load_widths_ok's rule
_CHUNK_RANGE = (1, max(ASYNC_CHUNK_BYTES))

_TOP = ("schema", "ladder", "ladder_wave64", "ladder_targets", "filters", "cta_orders",
        "stages", "vec_pairs", "async_chunk_pairs", "ws_replicas", "dtypes", "cover",
        "depthwise", "small_c")
# A depthwise entry's [T, tile_n, tile_k, vec, wo_run] ranges (the exact rules are spec.py's,
# per target: the walk keeps what validate admits), wo_run optional (1); at most
# MAX_DEPTHWISE entries.
_DEPTHWISE_FIELDS = ("T", "tile_n", "tile_k", "vec", "wo_run")
_DEPTHWISE_RANGES = (DEPTHWISE_TAPS, TILE_RANGE, (1, 64), _VEC_RANGE, (1, max(WO_RUNS)))
MAX_DEPTHWISE = 24
# A small-C entry's [T, C, tile_n, tile_k, vec] (C: the compiled channel count), alike.
_SMALL_C_FIELDS = ("T", "C", "tile_n", "tile_k", "vec")
_SMALL_C_RANGES = (DEPTHWISE_TAPS, SMALL_C_CHANNELS, TILE_RANGE, (1, 64), _VEC_RANGE)
# Optional ladders per wave size: the key and the wave size its targets have.
_WAVE_LADDERS = {"ladder_wave64": 64}
_LIMIT_FIELDS = tuple(LIMIT_RANGES)
# A target's measured exclusions: [tile_m, tile_n, tile_k, warp_m, warp_n, vec_a, vec_b]
# of the sync loop, and [.., chunk_a, chunk_b] (bytes) of the async one.
_EXCLUDE = "exclude"
_EXCLUDE_ASYNC = "exclude_async"
_EXCLUDES = {_EXCLUDE: ("vec_a", "vec_b", _VEC_RANGE),
             _EXCLUDE_ASYNC: ("chunk_a", "chunk_b", _CHUNK_RANGE)}
MAX_EXCLUDE = 64
# Grouped CTA orders per target: tile-rows per group (1 is the row-major order every job
# has), at most MAX_CTA_GROUPS of them, each adding one job per job of the tiles it covers.
CTA_GROUPS_RANGE = (2, CTA_GROUP_RANGE[1])
MAX_CTA_GROUPS = 4
# Async-loop stage counts per target past the ping-pong (2, every async job's), each adding
# one job per async job of the tiles it covers.
STAGES_RANGE = (3, STAGE_RANGE[1])


def load(path: str | os.PathLike | None = None) -> JobData:
    """Parse and check one geometries file; raises GeometryFileError (one line)."""
    p = Path(path) if path is not None else default_path()
    r = NodeReader(str(p), GeometryFileError)
    root = r.compose()
    if root is None:
        raise r.fail(None, "<top>", "empty file")
    top = r.mapping(root, "<top>", allowed=_TOP)

    def section(key: str) -> yaml.Node:
        return r.require(top, root, "<top>", key)

    schema = r.int_(section("schema"), "schema", 1, 1 << 20)
    if schema != 1:
        raise r.fail(top["schema"], "schema", f"unsupported schema {schema} (this tool reads 1)")
    ladder = _ladder(r, section("ladder"))
    wave_ladders = tuple((wave, _ladder(r, top[key], key))
                         for key, wave in _WAVE_LADDERS.items() if key in top)
    target_ladders = tuple(
        (t, _ladder(r, node, f"ladder_targets.{t}"))
        for t, node in (r.mapping(top["ladder_targets"], "ladder_targets",
                                  allowed=tuple(kernel_target_names()), what="target").items()
                        if "ladder_targets" in top else ()))
    limits, target_limits = _filters(r, section("filters"))
    if "cta_orders" in top:
        target_limits = _cta_orders(r, top["cta_orders"], limits, target_limits)
    if "stages" in top:
        target_limits = _stages(r, top["stages"], limits, target_limits)
    vec_pairs = _pairs(r, section("vec_pairs"), "vec_pairs", "sync", ladder)
    chunk_pairs = _pairs(r, section("async_chunk_pairs"), "async_chunk_pairs", "async", ladder)
    ws = r.int_(section("ws_replicas"), "ws_replicas", *WS_REPLICAS_RANGE)
    default_dtypes, optional_dtypes = _dtypes(r, section("dtypes"))
    # the cover is checked against the rest of the file's own ladders and budgets
    data = JobData(path=str(p), ladder=ladder, limits=limits, vec_pairs=vec_pairs,
                   async_chunk_pairs=chunk_pairs, ws_replicas=ws,
                   default_dtypes=default_dtypes, optional_dtypes=optional_dtypes,
                   cover=(), target_limits=target_limits, wave_ladders=wave_ladders,
                   target_ladders=target_ladders,
                   depthwise=_direct(r, top, "depthwise", _DEPTHWISE_RANGES,
                                     _DEPTHWISE_FIELDS, optional_last=True),
                   small_c=_direct(r, top, "small_c", _SMALL_C_RANGES, _SMALL_C_FIELDS))
    return replace(data, cover=_cover(r, section("cover"), data))


def _ints(r: NodeReader, node: yaml.Node, field: str, rng: tuple[int, int],
          max_len: int = MAX_AXIS_VALUES) -> tuple[int, ...]:
    """A list of 1 to ``max_len`` distinct integers in ``rng``."""
    items = r.seq(node, field, max_len=max_len)
    if not items:
        raise r.fail(node, field, "must not be empty")
    vals = tuple(r.int_(v, f"{field}[{i}]", *rng) for i, v in enumerate(items))
    if len(set(vals)) != len(vals):
        raise r.fail(node, field, "repeated value")
    return vals


def _int_row(r: NodeReader, node: yaml.Node, field: str, rngs: tuple[tuple[int, int], ...],
             names: tuple[str, ...] = ()) -> tuple[int, ...]:
    """A list of exactly ``len(rngs)`` integers, each in its range (the error lists
    ``names``, the positions' meaning, where given)."""
    items = r.seq(node, field)
    if len(items) != len(rngs):
        said = f" [{', '.join(names)}]" if names else ""
        raise r.fail(node, field, f"expected {len(rngs)} integers{said}, got {len(items)}")
    return tuple(r.int_(v, f"{field}[{j}]", *rg)
                 for j, (v, rg) in enumerate(zip(items, rngs, strict=True)))


def _axis_range(axis: str) -> tuple[int, int]:
    return TILE_RANGE if axis.startswith("tile") else WARP_RANGE


def _geometry(r: NodeReader, node: yaml.Node, field: str) -> Geometry:
    """[tile_m, tile_n, tile_k, warp_m, warp_n], each in its axis's range."""
    rngs = tuple(_axis_range(a) for a in _LADDER_AXES)
    return _int_row(r, node, field, rngs, _LADDER_AXES)  # type: ignore[return-value]


def _ladder(r: NodeReader, node: yaml.Node, key: str = "ladder"
            ) -> dict[str, tuple[int, ...]]:
    lad = r.mapping(node, key, allowed=_LADDER_AXES, what="axis")
    return {a: _ints(r, r.require(lad, node, key, a), f"{key}.{a}",
                     _axis_range(a))
            for a in _LADDER_AXES}


def _exclude(r: NodeReader, node: yaml.Node, field: str, key: str
             ) -> tuple[tuple[int, int, int, int, int, int, int], ...]:
    """Geometry + load-width pair entries (``_EXCLUDES[key]``: the sync loop's vec pair,
    the async loop's chunk pair), each axis in its range, none repeated."""
    a, b, width = _EXCLUDES[key]
    rngs = (*(_axis_range(x) for x in _LADDER_AXES), width, width)
    out: list[tuple[int, ...]] = []
    for i, item in enumerate(r.seq(node, field, max_len=MAX_EXCLUDE)):
        e = _int_row(r, item, f"{field}[{i}]", rngs, (*_LADDER_AXES, a, b))
        if e in out:
            raise r.fail(item, f"{field}[{i}]", f"repeated entry {list(e)}")
        out.append(e)
    return tuple(out)  # type: ignore[return-value]


def _limits(r: NodeReader, over: dict[str, yaml.Node], field: str, base: Limits) -> Limits:
    vals: dict = {k: r.int_(v, f"{field}.{k}", *LIMIT_RANGES[k]) for k, v in over.items()
                  if k not in _EXCLUDES}
    for key in _EXCLUDES:
        if key in over:
            vals[key] = _exclude(r, over[key], f"{field}.{key}", key)
    out = replace(base, **vals)
    if out.min_block_size > out.max_block_size:
        where = over.get("min_block_size") or over.get("max_block_size")
        raise r.fail(where, f"{field}.min_block_size", f"{out.min_block_size} exceeds "
                                                       f"max_block_size {out.max_block_size}")
    return out


def _filters(r: NodeReader, node: yaml.Node) -> tuple[Limits, tuple[tuple[str, Limits], ...]]:
    """The budgets every target starts from, and the per-target overrides applied."""
    fl = r.mapping(node, "filters", allowed=(*_LIMIT_FIELDS, "targets"), what="filter")
    for k in _LIMIT_FIELDS:
        r.require(fl, node, "filters", k)
    limits = _limits(r, {k: fl[k] for k in _LIMIT_FIELDS}, "filters", Limits())
    if "targets" not in fl:
        return limits, ()
    out = []
    for t, t_node in r.mapping(fl["targets"], "filters.targets",
                               allowed=tuple(kernel_target_names()), what="target").items():
        over = r.mapping(t_node, f"filters.targets.{t}", allowed=(*_LIMIT_FIELDS, *_EXCLUDES),
                         what="filter")
        out.append((t, _limits(r, over, f"filters.targets.{t}", limits)))
    return limits, tuple(out)


def _cta_orders(r: NodeReader, node: yaml.Node, base: Limits,
                target_limits: tuple[tuple[str, Limits], ...]
                ) -> tuple[tuple[str, Limits], ...]:
    """Per target, ``{groups: [G, ...], min_tile: T}``, folded into the target's budgets
    (``Limits.cta_groups``): the walk, count and validate read the orders from there."""
    per = dict(target_limits)
    for t, t_node in r.mapping(node, "cta_orders", allowed=tuple(kernel_target_names()),
                               what="target").items():
        field = f"cta_orders.{t}"
        m = r.mapping(t_node, field, allowed=("groups", "min_tile"))
        groups = _ints(r, r.require(m, t_node, field, "groups"), f"{field}.groups",
                       CTA_GROUPS_RANGE, max_len=MAX_CTA_GROUPS)
        min_tile = r.int_(r.require(m, t_node, field, "min_tile"), f"{field}.min_tile",
                          *TILE_RANGE)
        per[t] = replace(per.get(t, base), cta_groups=groups, cta_group_min_tile=min_tile)
    return tuple(per.items())


def _stages(r: NodeReader, node: yaml.Node, base: Limits,
            target_limits: tuple[tuple[str, Limits], ...]) -> tuple[tuple[str, Limits], ...]:
    """Per target with an async loop, ``{counts: [S, ...], min_tile: T}``, folded into the
    target's budgets (``Limits.stages``): the walk, count and validate read them there."""
    per = dict(target_limits)
    asynchronous = tuple(t for t in kernel_target_names() if get_target(t).async_lds_copy)
    for t, t_node in r.mapping(node, "stages", allowed=asynchronous,
                               what="target with an async loop").items():
        field = f"stages.{t}"
        m = r.mapping(t_node, field, allowed=("counts", "min_tile"))
        counts = _ints(r, r.require(m, t_node, field, "counts"), f"{field}.counts",
                       STAGES_RANGE, max_len=STAGES_RANGE[1] - STAGES_RANGE[0] + 1)
        min_tile = r.int_(r.require(m, t_node, field, "min_tile"), f"{field}.min_tile",
                          *TILE_RANGE)
        per[t] = replace(per.get(t, base), stages=counts, stages_min_tile=min_tile)
    return tuple(per.items())


def _pairs(r: NodeReader, node: yaml.Node, key: str, k_loop: str,
           ladder: dict[str, tuple[int, ...]]) -> tuple[tuple[int, int], ...]:
    """(a, b) width pairs: each admitted by load_widths_ok, none repeated."""
    rng = _VEC_RANGE if k_loop == "sync" else _CHUNK_RANGE
    out: list[tuple[int, int]] = []
    for i, item in enumerate(r.seq(node, key, max_len=16)):
        a, b = _int_row(r, item, f"{key}[{i}]", (rng, rng))
        ok, why = load_widths_ok(LoadWidths(k_loop, a, b), "fp16", max(ladder["tile_m"]),
                                 max(ladder["tile_n"]))
        if not ok:
            raise r.fail(item, f"{key}[{i}]", why)
        if (a, b) in out:
            raise r.fail(item, f"{key}[{i}]", f"repeated pair {[a, b]}")
        out.append((a, b))
    if not out:
        raise r.fail(node, key, "must not be empty")
    return tuple(out)


def _direct(r: NodeReader, top: dict, key: str, rngs: tuple[tuple[int, int], ...],
            names: tuple[str, ...], optional_last: bool = False) -> tuple[tuple[int, ...], ...]:
    """A direct kernel's entries (``depthwise``, ``small_c``; none where the file has no
    such key): rows of ``names``, each field in its range, vec one of VEC_WIDTHS, at most
    MAX_DEPTHWISE, none repeated. ``optional_last``: the last field (depthwise's wo_run,
    one of WO_RUNS) may be left out, for 1; every row comes back whole."""
    if key not in top:
        return ()
    out: list[tuple[int, ...]] = []
    for i, item in enumerate(r.seq(top[key], key, max_len=MAX_DEPTHWISE)):
        field = f"{key}[{i}]"
        short = False
        if optional_last:
            n = len(r.seq(item, field))
            if n not in (len(rngs) - 1, len(rngs)):
                raise r.fail(item, field, f"expected {len(rngs) - 1} or {len(rngs)} integers "
                                          f"[{', '.join(names)}], got {n}")
            short = n == len(rngs) - 1
        e = _int_row(r, item, field, rngs[:-1] if short else rngs,
                     names[:-1] if short else names)
        vec_at = names.index("vec")
        if e[vec_at] not in VEC_WIDTHS:
            raise r.fail(item, f"{field}[{vec_at}]", f"vec {e[vec_at]} not one of {VEC_WIDTHS}")
        if short:
            e = (*e, 1)
        elif optional_last and e[-1] not in WO_RUNS:
            raise r.fail(item, f"{field}[{len(e) - 1}]", f"wo_run {e[-1]} not one of {WO_RUNS}")
        if e in out:
            raise r.fail(item, field, f"repeated entry {list(e)}")
        out.append(e)
    return tuple(out)


def _dtypes(r: NodeReader, node: yaml.Node) -> tuple[tuple[str, ...], tuple[str, ...]]:
    dt = r.mapping(node, "dtypes", allowed=("default", "optional"))
    default = r.names(r.require(dt, node, "dtypes", "default"), "dtypes.default", DTYPE_KEYS)
    optional = r.names(dt["optional"], "dtypes.optional", DTYPE_KEYS) \
        if "optional" in dt else ()
    return default, optional


_Ladder = dict[str, tuple[int, ...]]


def _cover(r: NodeReader, node: yaml.Node, data: JobData) -> tuple[CoverEntry, ...]:
    cover: list[CoverEntry] = []
    for i, item in enumerate(r.seq(node, "cover", max_len=MAX_COVER)):
        entry = _cover_entry(r, item, f"cover[{i}]", data)
        if any(c.geometry == entry.geometry for c in cover):
            raise r.fail(item, f"cover[{i}].geometry",
                         f"repeated cover geometry {list(entry.geometry)}")
        cover.append(entry)
    return tuple(cover)


def _off_ladder(geom: Geometry, ladder: _Ladder) -> str:
    """The first axis of ``geom`` not on ``ladder`` ("" when every one is)."""
    for ax, v in zip(_LADDER_AXES, geom, strict=True):
        if v not in ladder[ax]:
            return f"{ax} {v} is not on the ladder"
    return ""


def _misfit(geom: Geometry, target: str, data: JobData) -> str:
    """Why ``target`` cannot keep ``geom`` as a cover entry ("" when it can): off its own
    ladder, or refused by its filters for fp16 or bf16."""
    if why := _off_ladder(geom, data.ladder_for(target)):
        return why
    for dtype in ("fp16", "bf16"):
        ok, why = geometry_fits(Tile(get_target(target), dtype, geom), data.limits_for(target))
        if not ok:
            return f"{dtype}: {why}"
    return ""


def _cover_entry(r: NodeReader, item: yaml.Node, field: str, data: JobData) -> CoverEntry:
    """One cover entry: a ladder geometry, its reason, the targets it serves (named, each of
    which must keep it, or every target whose ladder keeps it). A geometry must be on some
    ladder (the shared one or a wave size's), and a target keeps it only on its own."""
    m = r.mapping(item, field, allowed=("geometry", "reason", "targets"))
    g_node = r.require(m, item, field, "geometry")
    geom = _geometry(r, g_node, f"{field}.geometry")
    reason = r.str_(r.require(m, item, field, "reason"), f"{field}.reason")
    ladders = data.ladders()
    if all(_off_ladder(geom, lad) for lad in ladders):
        raise r.fail(g_node, f"{field}.geometry", _off_ladder(geom, ladders[0]))

    kernel_targets = tuple(kernel_target_names())
    if "targets" in m:
        targets = r.names(m["targets"], f"{field}.targets", kernel_targets)
        for t in targets:
            if why := _misfit(geom, t, data):
                raise r.fail(g_node, f"{field}.geometry", f"not on {t}'s ladder ({why})")
    else:
        targets = tuple(t for t in kernel_targets if not _misfit(geom, t, data))
        if not targets:
            raise r.fail(g_node, f"{field}.geometry",
                         f"on no target's ladder ({kernel_targets[0]}: "
                         f"{_misfit(geom, kernel_targets[0], data)})")
    return CoverEntry(geom, reason, targets)


@lru_cache(maxsize=4)
def _load_cached(path: str, mtime_ns: int) -> JobData:
    return load(path)


def default_jobdata(path: str | os.PathLike | None = None) -> JobData:
    p = Path(path) if path is not None else default_path()
    try:
        mtime = p.stat().st_mtime_ns
    except OSError:
        mtime = 0
    return _load_cached(str(p), mtime)
