"""The emitted IR of a fixed sample of walked jobs, hashed: proof that a refactor changed no kernel.

    python benchmarks/ir_keys.py --out before.json [--per-target 100] [--target T]...
    python benchmarks/ir_keys.py --against before.json

Per kernel target the sample is the ``--per-target`` walked labels with the smallest
sha256(label), so it does not move when geometries.yaml grows or shrinks around it. Each
label maps to the sha256 of ``emit_ir(spec).ir_text``. ``--against`` emits the labels of the
saved file that the walk still has and exits 1 naming every label whose IR changed
(labels the walk no longer yields are counted, not compared).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys

from wgradcache.jobs.walk import walk
from wgradcache.model.targets import kernel_target_names
from wgradcache.wgrad.emit import emit_ir


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def sample(targets: list[str], per_target: int) -> dict[str, object]:
    """The sampled specs by label, ``per_target`` per target."""
    out = {}
    for t in targets:
        specs = {s.label(): s for s in walk(t)}
        for label in sorted(specs, key=_sha)[:per_target]:
            out[label] = specs[label]
    return out


def ir_keys(specs: dict[str, object]) -> dict[str, str]:
    return {label: _sha(emit_ir(spec).ir_text) for label, spec in sorted(specs.items())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--against")
    ap.add_argument("--per-target", type=int, default=100)
    ap.add_argument("--target", action="append")
    a = ap.parse_args()
    if bool(a.out) == bool(a.against):
        ap.error("give exactly one of --out FILE or --against FILE")
    if a.out:
        keys = ir_keys(sample(a.target or list(kernel_target_names()), a.per_target))
        with open(a.out, "w") as f:
            json.dump(keys, f, indent=1, sort_keys=True)
        print(f"{len(keys)} labels written to {a.out}")
        return 0
    with open(a.against) as f:
        before = json.load(f)
    targets = sorted({label.split("-", 1)[0] for label in before})
    walked = {s.label(): s for t in targets for s in walk(t)}
    now = ir_keys({label: walked[label] for label in before if label in walked})
    changed = sorted(label for label, key in now.items() if key != before[label])
    for label in changed:
        print(f"changed: {label}")
    print(f"{len(now)} compared, {len(changed)} changed, "
          f"{len(before) - len(now)} no longer walked")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
