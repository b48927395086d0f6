"""LLVM IR text -> AMDGPU code object, in this process: parse, verify, codegen, link, list.

This is what runs inside a build worker, once per job, so it is built for many calls in one
process: LLVM's initialisation, the target machines, the tool paths and the disassembler are
cached per process, and no temporary file is written.

One codegen, not two. The cache needs the code object and an ISA listing (``isa_stats``),
and LLVM emits one file type per codegen run. Measured per job on this 2-core box
(``benchmarks/codegen.py``, 20 kernels, CPU time): a second in-process codegen for the
``.s`` adds ~60 ms (up to ~150 ms on the largest kernels); ``llvm-objdump`` ~42 ms, nearly
all process start-up (loading libLLVM); ``llvm-mc`` on LLVM's ``.s`` the same start-up, and
its object's ``.symtab`` differs from ``emit_object``'s, so the blob would depend on the
tools a machine has. The in-process disassembler (``disasm``: the system libLLVM's C API,
loaded once per process) adds ~4 ms. So the object always comes from ``emit_object``
(byte-identical to ``llc -O3``, facts §7, tested) and the listing, in order of preference,
from the in-process disassembler, ``llvm-objdump``, or a second codegen; ``isa_stats``
gives the same numbers on all three (tested).

Which LLVM runs codegen (``toolchain.codegen_backend``): the system's libLLVM-22 through its C
API (``libllvm``) by default; llvmlite's LLVM when there is none; an ``llc`` process per job
on request (``WGRADCACHE_CODEGEN=llc``, the reference pipeline of benchmarks/build.py). All
three give byte-identical code objects (tested). Codegen is ~90 % of a job. llvmlite's LLVM
is built with assertions (``llvmlite.binding.llvm_assertions_state == "on"``) and spends
~1.6x the CPU of Debian's libLLVM-22 on the same passes, which is why it is only the
fallback. Measured on 20 real jobs (benchmarks/codegen.py): object + listing through
libLLVM cost 0.94x the wall and 1.02x the CPU of ``llc-22`` + ``ld.lld-22`` (object only);
the object alone 0.85x / 0.92x; through llvmlite 1.37x / 1.43x.

Linking (``lldlink``): LLD in this process, ~0.7 ms per code object, when the native helper
can be built; else an ``ld.lld`` process started before parsing, reading the object from a pipe,
so its ~25 ms of start-up runs while this process does codegen and its link while this
process disassembles; it writes the code object to its stdout.
"""

from __future__ import annotations

import contextlib
import functools
import subprocess
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from wgradcache.compile.codeobject import CodeObjectInfo, read_code_object
from wgradcache.compile.disasm import OBJDUMP_ARGS, disassemble, disassembler_available
from wgradcache.compile.discovery import ToolchainError, find_disassembler, find_llc
from wgradcache.compile.libllvm import LLVMIRError, system_llvm, triple_for
from wgradcache.compile.lldlink import (
    LinkError,
    link_in_process,
    select_linker,
    subprocess_argv,
)
from wgradcache.compile.toolchain import codegen_backend, with_code_object_version
from wgradcache.model.backends import backend_of
from wgradcache.model.targets import CODE_OBJECT_VERSION, get_target

if TYPE_CHECKING:
    from wgradcache.compile.cubin import CubinInfo

__all__ = ["TRIPLE", "CodegenError", "CodegenOptions", "CompiledObject", "compile_ir",
           "compile_amdgpu", "compile_nvptx", "LISTINGS", "ToolStart"]

TRIPLE = "amdgcn-amd-amdhsa"
LISTINGS = ("auto", "disassembly", "assembly", "none")
_TOOL_TIMEOUT = 300


class CodegenError(RuntimeError):
    """IR that does not parse or verify, a linker failure, or a code object without kernel.

    (LLVM errors that abort or exit the process cannot be raised: see ``isolate``.)
    """


@dataclass(frozen=True)
class CodegenOptions:
    """Everything besides IR, target and toolchain that changes the code object bytes.

    All of it goes into the cache content key (``to_dict``).
    """

    opt_level: int = 3
    # Only CODE_OBJECT_VERSION: the lowering pins it in every kernel's IR (a field all the
    # same, so content keys say which version they hold).
    code_object_version: int = CODE_OBJECT_VERSION
    # llvmlite target features, e.g. "-xnack"; they change e_flags (facts §5). Never
    # "+wavefrontsize64" on gfx1250: LLVM drops the kernel silently (facts §1).
    features: str = ""

    def __post_init__(self) -> None:
        if self.opt_level not in (0, 1, 2, 3):
            raise ValueError(f"opt_level must be 0..3, got {self.opt_level}")
        if self.code_object_version != CODE_OBJECT_VERSION:
            raise ValueError(f"code_object_version {self.code_object_version!r} cannot be "
                             f"built: kernels are lowered for v{CODE_OBJECT_VERSION} "
                             f"(model.targets.CODE_OBJECT_VERSION)")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class CompiledObject:
    """A linked code object, its ISA listing and where the time went (seconds)."""

    hsaco: bytes
    asm: str
    listing: str  # "disassembly" (in-process or llvm-objdump), "assembly" (LLVM's .s), "none"
    info: CodeObjectInfo | CubinInfo  # the backend's reading of ``hsaco``
    timings: dict[str, float] = field(compare=False)


@functools.lru_cache(maxsize=1)
def _llvm():
    from llvmlite import binding

    binding.initialize_all_targets()
    binding.initialize_all_asmprinters()
    return binding


@functools.cache
def _target_machine(cpu: str, opt_level: int, features: str):
    binding = _llvm()
    target = binding.Target.from_triple(triple_for(cpu).decode())
    return target.create_target_machine(cpu=cpu, features=features, opt=opt_level)


@functools.lru_cache(maxsize=1)
def _objdump():
    return find_disassembler()


class _Tool:
    """A tool process started early, reading its input from a pipe (see module docstring)."""

    def __init__(self, argv: list[str], name: str | None = None):
        self.argv = argv
        self.name = name or argv[0]  # in error messages
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)

    def send(self, data: bytes) -> None:
        stdin, self.proc.stdin = self.proc.stdin, None  # so communicate() leaves it alone
        try:
            stdin.write(data)
            stdin.flush()
        except BrokenPipeError:
            pass  # the tool died early; finish() reports its stderr
        finally:
            with contextlib.suppress(BrokenPipeError):
                stdin.close()

    def finish(self) -> bytes:
        try:
            out, err = self.proc.communicate(timeout=_TOOL_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            raise CodegenError(f"{self.name} timed out after {_TOOL_TIMEOUT} s") from None
        if self.proc.returncode != 0:
            msg = err.decode(errors="replace").strip() or f"exit status {self.proc.returncode}"
            raise CodegenError(f"{self.name} failed: {msg}")
        return out

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        if self.proc.stdin is not None:
            self.proc.stdin.close()
            self.proc.stdin = None
        self.proc.communicate()


def _parse_llvmlite(ir: str):
    binding = _llvm()
    try:
        mod = binding.parse_assembly(ir)
    except RuntimeError as e:
        raise CodegenError(f"LLVM IR does not parse: {e}") from None
    try:
        mod.verify()
    except RuntimeError as e:
        raise CodegenError(f"LLVM IR does not verify: {e}") from None
    return mod


@contextlib.contextmanager
def _parsed(ir: str, backend: str) -> Iterator:
    """The parsed, verified module of ``backend`` (``libllvm``: a handle valid inside;
    ``llc``: the text, which llc parses)."""
    if backend == "llc":
        yield ir
        return
    if backend == "llvmlite":
        yield _parse_llvmlite(ir)
        return
    try:
        with system_llvm().module(ir) as mod:
            yield mod
    except LLVMIRError as e:
        raise CodegenError(str(e)) from None


def _emit(mod, target: str, options: CodegenOptions, backend: str, assembly: bool) -> bytes:
    """Codegen of a module from ``_parsed`` (which it changes: one emit per parse)."""
    if backend == "llc":
        return _llc(mod, target, options, assembly)
    if backend == "llvmlite":
        tm = _target_machine(target, options.opt_level, options.features)
        return tm.emit_assembly(mod).encode() if assembly else tm.emit_object(mod)
    return system_llvm().emit_module(mod, target, options.opt_level, options.features,
                                     assembly)


def _llc(ir: str, target: str, options: CodegenOptions, assembly: bool) -> bytes:
    """``llc`` as a subprocess, IR on stdin, the object (or ``.s``) on stdout."""
    argv = [str(find_llc()), f"-O{options.opt_level}", f"-mtriple={triple_for(target).decode()}",
            f"-mcpu={target}", f"-filetype={'asm' if assembly else 'obj'}", "-o", "-", "-"]
    if options.features:
        argv.insert(4, f"-mattr={options.features}")
    llc = _Tool(argv, name="llc")
    try:
        llc.send(ir.encode())
        return llc.finish()
    except BaseException:
        llc.kill()
        raise


def compile_ir(ir_text: str, target: str, options: CodegenOptions | None = None, *,
               listing: str = "auto") -> CompiledObject:
    """Compile one module holding one ``amdgpu_kernel`` for ``target``.

    ``listing``: "disassembly" (in-process, else llvm-objdump; ToolchainError if neither);
    "assembly" runs a second codegen for LLVM's full ``.s`` with directives and metadata
    (what ``wgradcache compile`` should write out); "auto" is "disassembly" when possible,
    else "assembly"; "none" skips the listing (``asm`` is empty).

    Raises CodegenError for IR that fails to parse/verify, a linker error, or a kernel LLVM
    dropped; ToolchainError without a linker. An unsupported intrinsic or too much LDS ends
    the process inside LLVM: run untrusted IR through ``isolate.compile_isolated``.
    """
    return backend_of(target).compile(ir_text, target, options or CodegenOptions(), listing)


def compile_nvptx(ir_text: str, target: str, options: CodegenOptions,
                    listing: str) -> CompiledObject:
    """NVPTX: codegen to PTX text (LLVM's "assembly" for this target), then ``ptxas`` to
    the sm cubin. The listing is nvdisasm's SASS of the cubin (kind "disassembly", what
    ``verify`` derives from a stored blob too); ``listing="assembly"`` gives the PTX
    instead (kind "ptx", ``wgradcache compile``'s ``.s``).

    ptxas reads a file, so the PTX and the cubin pass through a private temporary folder.
    """
    import tempfile

    from wgradcache.compile.cubin import disassemble_cubin, read_cubin
    from wgradcache.compile.discovery import find_ptxas

    if listing not in LISTINGS:
        raise ValueError(f"listing must be one of {LISTINGS}, got {listing!r}")
    ptxas = find_ptxas()
    backend = codegen_backend()
    t: dict[str, float] = {}
    t0 = time.perf_counter()
    with _parsed(ir_text, backend) as mod:
        t["parse"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        ptx = _emit(mod, target, options, backend, assembly=True).decode()
        t["codegen"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="wgradcache-ptxas-") as d:
        src, dst = Path(d) / "k.ptx", Path(d) / "k.cubin"
        src.write_text(ptx)
        try:
            out = subprocess.run([str(ptxas), f"-arch={target}", "-O3", "-o", str(dst),
                                  str(src)], capture_output=True, text=True,
                                 timeout=_TOOL_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise CodegenError(f"ptxas timed out after {_TOOL_TIMEOUT} s") from None
        if out.returncode != 0:
            msg = (out.stderr or out.stdout).strip() or f"exit status {out.returncode}"
            raise CodegenError(f"ptxas failed: {msg}")
        cubin = dst.read_bytes()
    t["link"] = time.perf_counter() - t2
    t3 = time.perf_counter()
    try:
        info = read_cubin(cubin)
    except ValueError as e:
        raise CodegenError(f"ptxas wrote an unusable cubin: {e}") from None
    t["read"] = time.perf_counter() - t3
    t4 = time.perf_counter()
    if listing == "none":
        asm, kind = "", "none"
    elif listing == "assembly":
        asm, kind = ptx, "ptx"
    else:
        try:
            asm, kind = disassemble_cubin(cubin), "disassembly"
        except ValueError as e:
            raise CodegenError(str(e)) from None
    t["listing"] = time.perf_counter() - t4
    t["total"] = time.perf_counter() - t0
    return CompiledObject(cubin, asm, kind, info, t)


def _lister(listing: str) -> str:
    """Where the listing comes from: "llvm" (in-process disassembler), "objdump", "codegen"."""
    if listing not in LISTINGS:
        raise ValueError(f"listing must be one of {LISTINGS}, got {listing!r}")
    if listing in ("assembly", "none"):
        return "codegen" if listing == "assembly" else "none"
    if disassembler_available():
        return "llvm"
    if _objdump() is not None:
        return "objdump"
    if listing == "disassembly":
        raise ToolchainError("no libLLVM >= 22 nor llvm-objdump >= 22 found to disassemble: "
                             "install `llvm-22` or use listing='assembly'")
    return "codegen"


def _link_in_process(obj: bytes) -> bytes:
    try:
        return link_in_process(obj)
    except LinkError as e:
        raise CodegenError(f"ld.lld (in-process) failed: {e}") from None


@dataclass(frozen=True)
class _Codegen:
    """One codegen's target, options and backend (``codegen_backend``): what every emit of
    its module, and a listing's second one, takes."""

    target: str
    options: CodegenOptions
    backend: str


def _listing(lister: str, obj: bytes, ir: str, cg: _Codegen, objdump: _Tool | None
             ) -> tuple[str, str]:
    """(the ISA listing, its kind) from ``lister`` (see ``_lister``); ``objdump``: the
    llvm-objdump process that was sent ``obj``."""
    if lister == "llvm":
        return disassemble(obj, cg.target, cg.options.features), "disassembly"
    if lister == "objdump":
        return objdump.finish().decode(), "disassembly"
    if lister == "codegen":  # a second parse: codegen changed the first module
        with _parsed(ir, cg.backend) as mod:
            asm = _emit(mod, cg.target, cg.options, cg.backend, assembly=True)
            return asm.decode(), "assembly"
    return "", "none"


@dataclass(frozen=True)
class ToolStart:
    """The benchmark's knobs of ``compile_amdgpu`` (the defaults are the build's):
    ``early=False`` starts the tool processes (an ``ld.lld`` when linking is not
    in-process, ``llvm-objdump``) after codegen; ``lister`` forces "llvm", "objdump",
    "codegen" or "none"."""

    early: bool = True
    lister: str | None = None


def compile_amdgpu(ir_text: str, target: str, options: CodegenOptions, listing: str,
                   start: ToolStart = ToolStart()) -> CompiledObject:
    """``compile_ir`` of the AMDGPU backend; ``start``: when the tool processes start and
    which lister (the benchmark's, ``ToolStart``)."""
    get_target(target)  # unknown names fail here, with the valid ones listed
    early_tools = start.early
    lister = start.lister or _lister(listing)
    linker = select_linker()
    argv = []  # the tool processes: [ld.lld unless in-process] + [llvm-objdump]
    if linker.kind == "subprocess":
        argv.append(subprocess_argv(linker.path))
    if lister == "objdump":
        argv.append([str(_objdump()), *OBJDUMP_ARGS])
    ir = with_code_object_version(ir_text, options.code_object_version)

    backend = codegen_backend()

    t: dict[str, float] = {}
    t0 = time.perf_counter()
    tools = [_Tool(a) for a in argv] if early_tools else []
    try:
        t1 = time.perf_counter()
        with _parsed(ir, backend) as mod:
            t["parse"] = time.perf_counter() - t1
            t2 = time.perf_counter()
            obj = _emit(mod, target, options, backend, assembly=False)
            t["codegen"] = time.perf_counter() - t2
        tools = tools or [_Tool(a) for a in argv]
        for tool in reversed(tools):  # objdump first: it has more work than the linker
            tool.send(obj)
        t4 = time.perf_counter()
        hsaco = _link_in_process(obj) if linker.kind == "inprocess" else b""
        t["link"] = time.perf_counter() - t4
        # A linker process works while this process lists; each phase is the wall time
        # spent here.
        t3 = time.perf_counter()
        asm, kind = _listing(lister, obj, ir, _Codegen(target, options, backend),
                             tools[-1] if lister == "objdump" else None)
        t["listing"] = time.perf_counter() - t3
        if linker.kind == "subprocess":
            t4 = time.perf_counter()
            hsaco = tools[0].finish()
            t["link"] = time.perf_counter() - t4
    except BaseException:
        for tool in tools:
            tool.kill()
        raise
    t5 = time.perf_counter()
    try:
        info = read_code_object(hsaco)
    except ValueError as e:
        raise CodegenError(f"linked code object is unusable: {e}") from None
    t["read"] = time.perf_counter() - t5
    t["total"] = time.perf_counter() - t0
    return CompiledObject(hsaco, asm, kind, info, t)
