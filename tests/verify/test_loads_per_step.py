"""Structure verify's count of a K step's global loads: per operand, its vectors over the
block rounded up (each operand's partial last slot is a predicated load of its own)."""

from __future__ import annotations

import pytest

from wgradcache.model.spec import from_label
from wgradcache.pipeline.verify import isa_problems


def _load_findings(label: str, loads: int) -> list[str]:
    return [p for p in isa_problems(from_label(label), {"main_loop_global_loads": loads})
            if "global loads per K step" in p]


@pytest.mark.parametrize("label, want", [
    # wave64, 256 threads: 128 vectors of A and 128 of B, half a vector each a thread
    ("gfx942-fp16-t32x32x32-w2x2-v8x8-sync-default-none", 2),
    ("gfx950-bf16-t32x32x32-w2x2-v8x8-sync-default-atomic", 2),
    # wave32, 128 threads: one vector of each
    ("gfx1250-fp16-t32x32x32-w2x2-v8x8-sync-default-none", 2),
    # 8 and 2 vectors a thread of A (v1) and B (v4) over 128 threads
    ("gfx1201-fp16-t32x64x32-w2x2-v1x4-sync-default-none", 8 + 4),
])
def test_loads_are_counted_per_operand(label, want):
    assert _load_findings(label, want) == []
    assert _load_findings(label, want - 1) == [
        f"{want - 1} global loads per K step, the spec's widths make {want}"]
