"""Load and schema-check geometries.yaml: the ladder, the filters, the cover, the widths.

A bad file must stop every command with one line naming the file, the line and the field
(exit code 2 at the CLI), never a traceback and never a silently different walk. We compose
the YAML to nodes (not plain dicts) so every value keeps its line number.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from wgradcache.model.spec import DTYPE_KEYS, Limits, geometry_fits, load_widths_ok
from wgradcache.model.targets import get_target, kernel_target_names

__all__ = ["GeometryFileError", "CoverEntry", "JobData", "load", "default_path", "default_jobdata"]

Geometry = tuple[int, int, int, int, int]
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

    def limits_for(self, target: str) -> Limits:
        return dict(self.target_limits).get(target, self.limits)

    def ladder_geometries(self) -> list[Geometry]:
        """Every ladder combination, in a fixed order (before per-target filters)."""
        return list(itertools.product(*(self.ladder[a] for a in _LADDER_AXES)))

    def cover_for(self, target: str) -> dict[Geometry, CoverEntry]:
        return {c.geometry: c for c in self.cover if target in c.targets}

    def with_changes(self, **changes) -> JobData:
        from dataclasses import replace
        return replace(self, **changes)


# Package data (pyproject's package-data), found beside the package: the repository root is
# not there in an installed wheel, where a root-relative path read site-packages' parent.
_SHIPPED_FILE = Path(__file__).resolve().parents[1] / "data" / "geometries.yaml"


def default_path() -> Path:
    """$WGRADCACHE_GEOMETRIES, else the shipped ``wgradcache/data/geometries.yaml``."""
    env = os.environ.get("WGRADCACHE_GEOMETRIES")
    return Path(env) if env else _SHIPPED_FILE


class _Reader:
    def __init__(self, path: str):
        self.path = path

    def fail(self, node: yaml.Node | None, field: str, problem: str) -> GeometryFileError:
        line = node.start_mark.line + 1 if node is not None else 1
        return GeometryFileError(f"{self.path}:{line}: {field}: {problem}")

    def mapping(self, node: yaml.Node, field: str) -> dict[str, yaml.Node]:
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, field, "expected a mapping")
        out: dict[str, yaml.Node] = {}
        for k, v in node.value:
            if not isinstance(k, yaml.ScalarNode):
                raise self.fail(k, field, "keys must be plain names")
            if k.value in out:
                raise self.fail(k, f"{field}.{k.value}", "duplicate key")
            out[k.value] = v
        return out

    def require(self, m: dict[str, yaml.Node], parent: yaml.Node, field: str,
                key: str) -> yaml.Node:
        if key not in m:
            raise self.fail(parent, field, f"missing key {key!r}")
        return m[key]

    def seq(self, node: yaml.Node, field: str) -> list[yaml.Node]:
        if not isinstance(node, yaml.SequenceNode):
            raise self.fail(node, field, "expected a list")
        return list(node.value)

    def int_(self, node: yaml.Node, field: str, lo: int = 1) -> int:
        value = yaml.safe_load(yaml.serialize(node)) if isinstance(node, yaml.ScalarNode) else None
        if isinstance(value, bool) or not isinstance(value, int):
            got = getattr(node, "value", node)
            raise self.fail(node, field, f"expected an integer, got {got!r}")
        if value < lo:
            raise self.fail(node, field, f"must be >= {lo}, got {value}")
        return value

    def str_(self, node: yaml.Node, field: str) -> str:
        if not isinstance(node, yaml.ScalarNode) or not str(node.value).strip():
            raise self.fail(node, field, "expected a non-empty string")
        return str(node.value)

    def ints(self, node: yaml.Node, field: str, n: int | None = None) -> tuple[int, ...]:
        items = self.seq(node, field)
        if n is not None and len(items) != n:
            raise self.fail(node, field, f"expected {n} integers, got {len(items)}")
        if not items:
            raise self.fail(node, field, "must not be empty")
        vals = tuple(self.int_(v, f"{field}[{i}]") for i, v in enumerate(items))
        if len(set(vals)) != len(vals) and n is None:
            raise self.fail(node, field, "repeated value")
        return vals

    def names(self, node: yaml.Node, field: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
        out = []
        for i, v in enumerate(self.seq(node, field)):
            s = self.str_(v, f"{field}[{i}]")
            if s not in allowed:
                raise self.fail(v, f"{field}[{i}]", f"unknown {s!r}; valid: {', '.join(allowed)}")
            out.append(s)
        return tuple(out)


_TOP = ("schema", "ladder", "filters", "vec_pairs", "async_chunk_pairs", "ws_replicas",
        "dtypes", "cover")


def load(path: str | os.PathLike | None = None) -> JobData:
    """Parse and check one geometries file; raises GeometryFileError (one line)."""
    p = Path(path) if path is not None else default_path()
    r = _Reader(str(p))
    try:
        text = p.read_text()
    except OSError as e:
        raise GeometryFileError(f"{p}: cannot read: {e.strerror}") from None
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        raise GeometryFileError(f"{p}:{line}: not valid YAML: {getattr(e, 'problem', e)}") from None
    if root is None:
        raise GeometryFileError(f"{p}:1: empty file")
    top = r.mapping(root, "<top>")
    for k, v in top.items():
        if k not in _TOP:
            raise r.fail(v, k, f"unknown key; valid: {', '.join(_TOP)}")
    schema = r.int_(r.require(top, root, "<top>", "schema"), "schema")
    if schema != 1:
        raise r.fail(top["schema"], "schema", f"unsupported schema {schema} (this tool reads 1)")

    lad_node = r.require(top, root, "<top>", "ladder")
    lad = r.mapping(lad_node, "ladder")
    for k, v in lad.items():
        if k not in _LADDER_AXES:
            raise r.fail(v, f"ladder.{k}", f"unknown axis; valid: {', '.join(_LADDER_AXES)}")
    ladder = {a: r.ints(r.require(lad, lad_node, "ladder", a), f"ladder.{a}")
              for a in _LADDER_AXES}

    f_node = r.require(top, root, "<top>", "filters")
    fl = r.mapping(f_node, "filters")
    limit_fields = ("max_acc_per_lane", "max_block_size", "min_block_size", "max_k_steps",
                    "max_loads_per_thread")
    for k, v in fl.items():
        if k not in (*limit_fields, "targets"):
            raise r.fail(v, f"filters.{k}",
                         f"unknown filter; valid: {', '.join(limit_fields)}, targets")
    limits = Limits(**{k: r.int_(r.require(fl, f_node, "filters", k), f"filters.{k}")
                       for k in limit_fields})
    target_limits: list[tuple[str, Limits]] = []
    if "targets" in fl:
        from dataclasses import replace

        tl = r.mapping(fl["targets"], "filters.targets")
        for t, node in tl.items():
            if t not in kernel_target_names():
                raise r.fail(node, f"filters.targets.{t}",
                             f"unknown target; valid: {', '.join(kernel_target_names())}")
            over = r.mapping(node, f"filters.targets.{t}")
            for k, v in over.items():
                if k not in limit_fields:
                    raise r.fail(v, f"filters.targets.{t}.{k}",
                                 f"unknown filter; valid: {', '.join(limit_fields)}")
            target_limits.append((t, replace(limits, **{
                k: r.int_(v, f"filters.targets.{t}.{k}") for k, v in over.items()})))

    def limits_for(t: str) -> Limits:
        return dict(target_limits).get(t, limits)

    def pairs(key: str, k_loop: str) -> tuple[tuple[int, int], ...]:
        node = r.require(top, root, "<top>", key)
        out = []
        for i, item in enumerate(r.seq(node, key)):
            a, b = r.ints(item, f"{key}[{i}]", n=2)
            ok, why = load_widths_ok(k_loop, "fp16", max(ladder["tile_m"]),
                                     max(ladder["tile_n"]), a, b)
            if not ok:
                raise r.fail(item, f"{key}[{i}]", why)
            if (a, b) in out:
                raise r.fail(item, f"{key}[{i}]", f"repeated pair {[a, b]}")
            out.append((a, b))
        if not out:
            raise r.fail(node, key, "must not be empty")
        return tuple(out)

    vec_pairs = pairs("vec_pairs", "sync")
    chunk_pairs = pairs("async_chunk_pairs", "async")
    ws = r.int_(r.require(top, root, "<top>", "ws_replicas"), "ws_replicas")

    d_node = r.require(top, root, "<top>", "dtypes")
    dt = r.mapping(d_node, "dtypes")
    default_dtypes = r.names(r.require(dt, d_node, "dtypes", "default"), "dtypes.default",
                             DTYPE_KEYS)
    optional_dtypes = r.names(dt["optional"], "dtypes.optional", DTYPE_KEYS) \
        if "optional" in dt else ()

    c_node = r.require(top, root, "<top>", "cover")
    cover: list[CoverEntry] = []
    kernel_targets = tuple(kernel_target_names())
    for i, item in enumerate(r.seq(c_node, "cover")):
        field = f"cover[{i}]"
        m = r.mapping(item, field)
        for k, v in m.items():
            if k not in ("geometry", "reason", "targets"):
                raise r.fail(v, f"{field}.{k}", "unknown key; valid: geometry, reason, targets")
        g_node = r.require(m, item, field, "geometry")
        geom: Geometry = r.ints(g_node, f"{field}.geometry", n=5)  # type: ignore[assignment]
        reason = r.str_(r.require(m, item, field, "reason"), f"{field}.reason")
        for ax, v in zip(_LADDER_AXES, geom, strict=True):
            if v not in ladder[ax]:
                raise r.fail(g_node, f"{field}.geometry", f"{ax} {v} is not on the ladder")

        def misfit(t: str, geom: Geometry = geom) -> str:
            for dtype in ("fp16", "bf16"):
                ok, why = geometry_fits(get_target(t), dtype, geom, limits_for(t))
                if not ok:
                    return f"{dtype}: {why}"
            return ""

        if "targets" in m:  # named: each must keep it
            targets = r.names(m["targets"], f"{field}.targets", kernel_targets)
            for t in targets:
                if misfit(t):
                    raise r.fail(g_node, f"{field}.geometry",
                                 f"not on {t}'s ladder ({misfit(t)})")
        else:  # every target whose ladder keeps it
            targets = tuple(t for t in kernel_targets if not misfit(t))
            if not targets:
                raise r.fail(g_node, f"{field}.geometry",
                             f"on no target's ladder ({kernel_targets[0]}: "
                             f"{misfit(kernel_targets[0])})")
        if any(c.geometry == geom for c in cover):
            raise r.fail(g_node, f"{field}.geometry", f"repeated cover geometry {list(geom)}")
        cover.append(CoverEntry(geom, reason, targets))

    return JobData(path=str(p), ladder=ladder, limits=limits, vec_pairs=vec_pairs,
                   async_chunk_pairs=chunk_pairs, ws_replicas=ws,
                   default_dtypes=default_dtypes, optional_dtypes=optional_dtypes,
                   cover=tuple(cover), target_limits=tuple(target_limits))


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
