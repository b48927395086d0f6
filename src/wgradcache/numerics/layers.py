"""Reference layer sets: named conv layers of real networks, weighted by repeats.

The geometry cover of geometries.yaml is chosen for ``layers/reference.yaml``; ``select``'s
tests check that every one of its layers is served. Read by path: not package data.
"""

from __future__ import annotations

from dataclasses import dataclass

from wgradcache.model.problem import ConvProblem

__all__ = ["Layer", "load_layers"]


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
