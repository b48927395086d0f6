"""compile_isolated: LLVM may kill its process, ours lives on; and codegen is deterministic."""

from __future__ import annotations

import os

from wgradcache.compile.codegen import CodegenOptions
from wgradcache.compile.isolate import compile_isolated, llvm_error_message
from wgradcache.compile.samples import GemmSample, gemm_kernel, lds_kernel, mma_kernel


def test_cannot_select_aborts_the_child_only():
    pid = os.getpid()
    # The gfx1250 16x16x32 WMMA does not select on gfx1201 (facts §1): SIGABRT in LLVM.
    out = compile_isolated(mma_kernel("gfx1250"), "gfx1201")
    assert not out.ok and out.obj is None
    assert out.error.startswith("codegen process killed by SIGABRT: LLVM ERROR: Cannot select")
    assert "llvm.amdgcn.wmma.f32.16x16x32.f16" in out.error
    assert os.getpid() == pid


def test_lds_overflow_exits_the_child_only():
    out = compile_isolated(lds_kernel(65540), "gfx1151")
    assert not out.ok
    assert out.error == ("codegen process exited with status 1: error: <unknown>:0:0: "
                         "local memory (65540) exceeds limit (65536) in function 'k'")


def test_python_side_failures_are_outcomes():
    bad = compile_isolated("define amdgpu_kernel void @k( {", "gfx1250")
    assert not bad.ok and bad.error.startswith("CodegenError: LLVM IR does not parse")
    unknown = compile_isolated(mma_kernel("gfx1250"), "gfx0")
    assert not unknown.ok and unknown.error.startswith("KeyError: \"unknown target 'gfx0'")


def test_silently_dropped_kernel_is_a_failure():
    # gfx1250 + wavefrontsize64 "compiles" and lists no kernel (facts §1).
    out = compile_isolated(mma_kernel("gfx1250"), "gfx1250",
                           CodegenOptions(features="+wavefrontsize64"))
    assert not out.ok
    assert "lists 0 kernels in amdhsa.kernels" in out.error


def test_timeout_kills_the_child():
    out = compile_isolated(gemm_kernel("gfx1250", GemmSample(tile_k=128)), "gfx1250", timeout=0.05)
    assert (out.ok, out.error) == (False, "codegen timed out after 0.05 s; the process was "
                                          "killed")


def test_two_processes_give_identical_code_objects(compiled):
    ir = gemm_kernel("gfx1250", GemmSample(tile_k=64, async_copy=True, atomic=True))
    first = compile_isolated(ir, "gfx1250")
    second = compile_isolated(ir, "gfx1250")
    assert first.ok and second.ok, (first.error, second.error)
    assert first.obj.hsaco == second.obj.hsaco == compiled(ir, "gfx1250").hsaco
    assert first.obj.asm == second.obj.asm
    assert first.obj.info == second.obj.info


def test_llvm_error_message_drops_the_stack_dump():
    stderr = ("LLVM ERROR: Cannot select: intrinsic %llvm.amdgcn.foo\n"
              "PLEASE submit a bug report to https://example.invalid\n"
              "Stack dump:\n0.\tProgram arguments: python\n"
              "1.\tRunning pass 'CallGraph Pass Manager' on module '<string>'.\n"
              "2.\tRunning pass 'AMDGPU DAG->DAG Pattern Instruction Selection' on function "
              "'@k'\n #0 0x00007f llvm::sys::PrintStackTrace\n")
    assert llvm_error_message(stderr) == (
        "LLVM ERROR: Cannot select: intrinsic %llvm.amdgcn.foo | 2.\tRunning pass "
        "'AMDGPU DAG->DAG Pattern Instruction Selection' on function '@k'")
    assert llvm_error_message("\n\nsomething odd\n") == "something odd"
