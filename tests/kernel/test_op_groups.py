"""Every op group of ``GroupOp`` is read: a group nobody reads states a rule nothing
enforces. Read means named as ``GroupOp.<name>`` outside ``kernel/ir.py`` (the verifier,
the lowering, the emulator, the tests), or part of a group that is."""

from __future__ import annotations

import re
from pathlib import Path

from wgradcache.kernel.ir import GroupOp

ROOT = Path(__file__).resolve().parents[2]
IR = ROOT / "src" / "wgradcache" / "kernel" / "ir.py"


def unread_groups(ir_text: str, consumers: str) -> list[str]:
    """The groups of ``ir_text``'s GroupOp that ``consumers`` never reach."""
    body = re.split(r"\n(?=\S)", ir_text.split("class GroupOp:", 1)[1], maxsplit=1)[0]
    defs = dict(re.findall(r"^    ([A-Za-z]+) = (.*(?:\n {8,}.*)*)", body, re.MULTILINE))
    seen = set(re.findall(r"GroupOp\.([A-Za-z]+)", consumers)) & set(defs)
    todo = list(seen)
    while todo:  # a group built from others reads them
        for part in set(re.findall(r"\b([A-Z][A-Za-z]*)\b", defs[todo.pop()])) & set(defs):
            if part not in seen:
                seen.add(part)
                todo.append(part)
    return sorted(set(defs) - seen)


def test_every_op_group_is_read():
    consumers = "\n".join(p.read_text() for d in ("src", "tests") for p in
                          sorted((ROOT / d).rglob("*.py")) if p != IR)
    groups = [n for n, v in vars(GroupOp).items() if isinstance(v, frozenset)]
    assert len(groups) > 10
    assert unread_groups(IR.read_text(), consumers) == []


def test_a_group_only_composed_into_a_read_one_counts():
    ir = ("class GroupOp:\n    A = frozenset({Ops.X})\n    B = frozenset({Ops.Y,\n"
          "                   Ops.Z})\n    C = A | B\n    D = frozenset({Ops.W})\n")
    assert unread_groups(ir, "GroupOp.C") == ["D"]
    assert unread_groups(ir, "GroupOp.A") == ["B", "C", "D"]
