"""device_cache_ops: the cache maintenance a fenced agent-scope atomic adds, apart from the
workgroup fences every LDS barrier carries."""

from __future__ import annotations

import pytest

from wgradcache.compile.isa import isa_stats
from wgradcache.compile.samples import atomic_kernel
from wgradcache.model.spec import KernelSpec
from wgradcache.wgrad.emit import emit_ir


@pytest.mark.parametrize("target, seq_cst_ops", [("gfx1250", 2), ("gfx1201", 1),
                                                 ("gfx942", 2)])
def test_fenced_atomics_are_counted_unfenced_are_not(compiled, target, seq_cst_ops):
    mono = isa_stats(compiled(atomic_kernel("float", "monotonic"), target).asm)
    fenced = isa_stats(compiled(atomic_kernel("float", "seq_cst"), target).asm)
    assert mono["device_cache_ops"] == 0
    assert fenced["device_cache_ops"] == seq_cst_ops


@pytest.mark.parametrize("target", ["gfx1201", "gfx1151", "gfx1250"])
def test_barrier_fences_of_a_split_k_kernel_are_not_device_fences(compiled, target):
    spec = KernelSpec(target, "fp16", "fp32", 64, 64, 32, 2, 2, vec_a=8, vec_b=8,
                      reduction="atomic")
    k = emit_ir(spec)
    s = isa_stats(compiled(k.ir_text, target).asm)
    assert s["barriers"] > 0 and s["global_atomic_add_f32"] > 0
    assert s["device_cache_ops"] == 0
    if target == "gfx1201":
        assert s["global_inv"] > 0  # workgroup-scope (SCOPE_SE) invalidates at the barriers
