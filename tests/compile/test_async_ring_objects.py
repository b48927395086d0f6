"""Code objects of the deeper async ring (``spec.stages``): no spill, scratch or stack
frame, the ISA's wait depth (``main_loop_async_wait_depth``) what the ring leaves in
flight, and structure verify refusing a binary whose depth is another ring's."""

from __future__ import annotations

import pytest

from wgradcache.compile.codegen import compile_ir
from wgradcache.model.backends import backend_of
from wgradcache.model.spec import dynamic_lds_bytes, from_label, lds_bytes
from wgradcache.pipeline.verify import isa_problems
from wgradcache.wgrad.emit import emit_ir

# sm_90's: the one geometry where ptxas kept a stack frame (8 / 16 B in 128 registers)
# until the ring said one block per SM suffices (kernel.RING_MIN_BLOCKS)
LABELS = {"gfx1250-fp16-t128x128x64-w4x2-c16x16-async-default-none-s3": 8,
          "sm_90-fp16-t128x128x64-w4x2-c16x16-async-default-none-s3": 1,
          "sm_90-fp16-t128x128x64-w4x2-c16x16-async-default-none-s4": 2,
          "sm_90-fp16-t128x128x64-w4x2-c16x16-async-default-none": 0}


def isa_of(obj, target: str) -> dict[str, int]:
    return backend_of(target).isa_stats(obj.asm, obj.listing)


@pytest.fixture(scope="module")
def objects():
    return {label: compile_ir(emit_ir(from_label(label)).ir_text, label.split("-")[0])
            for label in LABELS}


@pytest.mark.parametrize("label", LABELS)
def test_ring_kernels_keep_no_frame_and_wait_at_their_depth(objects, label):
    spec, obj = from_label(label), objects[label]
    co = backend_of(spec.target).read_code_object(obj.hsaco)
    isa = isa_of(obj, spec.target)
    assert (co.spills, co.stack_bytes) == ("", 0), label
    assert isa["main_loop_async_wait_depth"] == LABELS[label]
    assert isa["main_loop_barriers"] == 1 and isa_problems(spec, isa) == []
    dynamic = dynamic_lds_bytes(spec)
    assert co.static_lds_bytes == lds_bytes(spec) - dynamic
    assert dynamic == (0 if spec.target == "gfx1250" else lds_bytes(spec))


def test_structure_refuses_a_binary_of_another_ring(objects):
    """The 3-stage binary posing as the 4-stage kernel, or a wait for all in its loop."""
    s3 = "sm_90-fp16-t128x128x64-w4x2-c16x16-async-default-none-s3"
    isa = isa_of(objects[s3], "sm_90")
    s4 = from_label(s3.replace("-s3", "-s4"))
    assert isa_problems(s4, isa) == [
        "the async loop's wait leaves 1 in flight, its ring of 4 stages 2"]
    g = "gfx1250-fp16-t128x128x64-w4x2-c16x16-async-default-none-s3"
    assert isa_problems(from_label(g), {**isa_of(objects[g], "gfx1250"),
                                        "main_loop_async_wait_depth": 0}) == [
        "the async loop's wait leaves 0 in flight, its ring of 3 stages 8"]


def test_the_ptx_listing_names_the_same_depth():
    """PTX (``cp.async.wait_group N``) and SASS (``DEPBAR.LE SB0, N``) readers agree."""
    label = "sm_90-fp16-t128x128x64-w4x2-c16x16-async-default-none-s4"
    obj = compile_ir(emit_ir(from_label(label)).ir_text, "sm_90", listing="assembly")
    assert "cp.async.wait_group \t2;" in obj.asm
    assert isa_of(obj, "sm_90")["main_loop_async_wait_depth"] == 2
