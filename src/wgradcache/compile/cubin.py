"""Read an NVIDIA cubin (ptxas's sm_90 ELF) and count what a PTX listing holds.

``CubinInfo``: what the bytes say, in NVIDIA's words (registers, static shared bytes, local
bytes, max threads per block, the parameter bank), from:

* ELF header: ``e_machine`` EM_CUDA (190); the SM in ``e_flags`` bits 8-15 (0x5a = 90 in
  the ABI-v2 cubins ptxas 12.8+ writes: ``EI_ABIVERSION`` 8; older v1 cubins hold it in
  bits 0-7) - both seen on ptxas 13.0 output here;
* the kernel: the one global ``STT_FUNC`` symbol, its ``.text.<sym>`` section (code bytes)
  and ``.nv.info.<sym>`` (its attribute records; the driver reads them at load: the
  analogue of the AMD kernel descriptor);
* ``.nv.info`` / ``.nv.info.<sym>`` records (``EIATTR_*``; format byte 1 = no value, 2 =
  byte, 3 = half-word, 4 = sized): REGCOUNT (0x2f: symbol index, registers), FRAME_SIZE
  (0x11: the stack frame in bytes per thread, where spills live), MAX_THREADS (0x05: the
  ``.maxntid``), KPARAM_INFO (0x17: one per parameter: ordinal, offset, size in bits
  18-31 of its flags word), CBANK_PARAM_SIZE (0x19: bytes of the parameter block). The
  encodings were read off ptxas 13.0 cubins of kernels with known registers, block and
  parameters (tests/compile/test_cubin.py holds them against ptxas's own report);
* shared memory: the ``.nv.shared.<sym>`` section, less the 1 KB the driver reserves per
  block on sm_8x/sm_90 (CUDA C++ Programming Guide, "Shared Memory" per compute capability;
  the cubin marks it with the ``.nv.reservedSmem`` symbols).

Spills are not in the ELF's records: the stack frame is (FRAME_SIZE), and the SASS's
STL/LDL are the spill stores and loads (``sass_stats`` of nvdisasm's listing, which the
build records and ``verify --level structure`` derives again from the stored cubin).
"""

from __future__ import annotations

import io
import re
import struct
from collections import Counter
from dataclasses import asdict, dataclass

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from wgradcache.compile.codeobject import KernelArg
from wgradcache.compile.loop_rank import main_loop_rank

__all__ = ["EM_CUDA", "RESERVED_SMEM", "WARP_SIZE", "CubinInfo", "is_cubin", "read_cubin",
           "ptx_stats", "nv_info", "sass_stats", "disassemble_cubin"]

EM_CUDA = 190
RESERVED_SMEM = 1024
_EIATTR_MAX_THREADS = 0x05
_EIATTR_FRAME_SIZE = 0x11
_EIATTR_KPARAM_INFO = 0x17
_EIATTR_CBANK_PARAM_SIZE = 0x19
_EIATTR_REGCOUNT = 0x2F
WARP_SIZE = 32  # threads of a warp on every SM (PTX ISA, "SIMT architecture")


@dataclass(frozen=True)
class CubinInfo:
    """What a cubin says about its one kernel, as the driver will see it. The properties
    below the fields are the questions every stage asks of a code object of either vendor
    (``codeobject.CodeObjectInfo`` answers them too): stages ask those, never a field."""

    e_flags: int
    sm: int  # 90 for sm_90; equals targets.Target.e_mach
    target: str  # "nvptx64-nvidia-cuda--sm_90"
    symbol: str
    has_symbol: bool
    has_nv_info: bool  # ``.nv.info.<symbol>``: the attributes the driver reads at load
    args: tuple[KernelArg, ...]  # by ordinal (``param<i>``): a cubin names no parameter
    registers: int
    static_shared_bytes: int  # ``.nv.shared.<symbol>``, less the driver's reserved 1 KB
    local_bytes: int  # the stack frame per thread (where spills live)
    max_threads_per_block: int  # ``.maxntid``; 0 when the kernel sets none
    param_bytes: int  # the parameter bank
    text_bytes: int

    # the words of the findings of the checks both vendors share (``verify_structure``)
    SHARED_WORD = "shared memory"
    STACK_WORD = "local memory"
    THREADS_WORD = "max threads per block"

    @property
    def mach(self) -> int:
        return self.sm

    @property
    def wave_size(self) -> int:
        return WARP_SIZE

    @property
    def max_threads(self) -> int:
        return self.max_threads_per_block

    @property
    def static_lds_bytes(self) -> int:
        return self.static_shared_bytes

    @property
    def stack_bytes(self) -> int:
        return self.local_bytes

    @property
    def loads_as_kernel(self) -> bool:
        return self.has_symbol and self.has_nv_info

    @property
    def spills(self) -> str:
        return ""  # a spill is local memory: ``stack_bytes`` holds it

    @property
    def explicit_args(self) -> tuple[KernelArg, ...]:
        return self.args

    def record(self, facts) -> dict:
        """The entry's record: these fields, the dynamic shared bytes a launch passes and
        the parameters by their ABI names (``facts``, a ``wgrad.abi.RecordFacts``: neither
        is in a cubin; a parameter past the names keeps its ordinal)."""
        names = facts.arg_names
        d = asdict(self)
        d["args"] = [{**asdict(a), "name": names[i] if i < len(names) else a.name}
                     for i, a in enumerate(self.args)]
        d["dynamic_shared_bytes"] = facts.dynamic_shared_bytes
        return d


def is_cubin(data: bytes) -> bool:
    """An ELF whose e_machine is EM_CUDA (two bytes at offset 18, little endian)."""
    return (len(data) >= 20 and bytes(data[:4]) == b"\x7fELF"
            and struct.unpack_from("<H", bytes(data[18:20]))[0] == EM_CUDA)


def nv_info(blob: bytes) -> list[tuple[int, bytes]]:
    """(attribute, value bytes) records of one ``.nv.info*`` section; ValueError when a
    record runs past the end."""
    out, i = [], 0
    while i < len(blob):
        if i + 2 > len(blob):
            raise ValueError("truncated .nv.info record")
        fmt, attr = blob[i], blob[i + 1]
        if fmt == 1:
            out.append((attr, b""))
            i += 2
        elif fmt in (2, 3):
            if i + 4 > len(blob):
                raise ValueError("truncated .nv.info record")
            out.append((attr, blob[i + 2:i + 4]))
            i += 4
        elif fmt == 4:
            if i + 4 > len(blob):
                raise ValueError("truncated .nv.info record")
            (size,) = struct.unpack_from("<H", blob, i + 2)
            if i + 4 + size > len(blob):
                raise ValueError("a .nv.info record runs past its section")
            out.append((attr, blob[i + 4:i + 4 + size]))
            i += 4 + size
        else:
            raise ValueError(f".nv.info record format {fmt} is unknown")
    return out


def _u32s(b: bytes) -> tuple[int, ...]:
    return struct.unpack(f"<{len(b) // 4}I", b[:len(b) // 4 * 4])


def read_cubin(data: bytes) -> CubinInfo:
    """The ``CubinInfo`` of a cubin holding exactly one kernel, from its ELF alone. The ELF
    holds no spill count: spill stores and loads are the SASS's STL/LDL (``sass_stats``),
    and the stack frame is ``local_bytes``. ValueError for anything that is not such a
    cubin."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValueError(f"cubin must be bytes, got {type(data).__name__}")
    data = bytes(data)
    if not is_cubin(data):
        raise ValueError("not a cubin (ELF with e_machine EM_CUDA)")
    try:
        elf = ELFFile(io.BytesIO(data))
        flags = elf.header["e_flags"]
        abiv = elf.header["e_ident"]["EI_ABIVERSION"]
        symtab = elf.get_section_by_name(".symtab")
        if not isinstance(symtab, SymbolTableSection):
            raise ValueError("cubin has no symbol table")
        syms = list(symtab.iter_symbols())
        kernels = [(i, s) for i, s in enumerate(syms)
                   if s["st_info"]["type"] == "STT_FUNC" and s["st_info"]["bind"] == "STB_GLOBAL"]
        if len(kernels) != 1:
            raise ValueError(f"cubin holds {len(kernels)} global functions, expected exactly 1")
        index, sym = kernels[0]
        name = sym.name
        text = elf.get_section_by_name(f".text.{name}")
        info_k = elf.get_section_by_name(f".nv.info.{name}")
        info = elf.get_section_by_name(".nv.info")
        shared = elf.get_section_by_name(f".nv.shared.{name}")
        reserved = any(s.name.startswith(".nv.reservedSmem") for s in syms)
        records = nv_info(info.data()) if info is not None else []
        k_records = nv_info(info_k.data()) if info_k is not None else []
    except ValueError:
        raise
    except Exception as e:  # pyelftools reports truncation and garbage in many types
        raise ValueError(f"malformed cubin: {type(e).__name__}: {e}") from None
    regs = frame = 0
    for attr, val in records:  # per-function records: (symbol index, value)
        if attr in (_EIATTR_REGCOUNT, _EIATTR_FRAME_SIZE) and len(val) >= 8:
            s, v = _u32s(val)[:2]
            if s == index:
                if attr == _EIATTR_REGCOUNT:
                    regs = v
                else:
                    frame = v
    max_threads, params, args = 0, 0, []
    for attr, val in k_records:
        if attr == _EIATTR_MAX_THREADS and len(val) >= 4:
            max_threads = _u32s(val)[0]
        elif attr == _EIATTR_CBANK_PARAM_SIZE and len(val) >= 2:
            params = struct.unpack("<H", val[:2])[0]
        elif attr == _EIATTR_KPARAM_INFO and len(val) >= 12:
            _, ordinal, offset, bits = struct.unpack("<IHHI", val[:12])
            args.append((ordinal, offset, (bits >> 18) & 0x3FFF))
    args.sort()
    smem = shared["sh_size"] if shared is not None else 0
    if reserved and smem:
        smem = max(0, smem - RESERVED_SMEM)
    sm = (flags >> 8) & 0xFF if abiv >= 8 else flags & 0xFF
    return CubinInfo(
        e_flags=flags, sm=sm, target=f"nvptx64-nvidia-cuda--sm_{sm}", symbol=name,
        has_symbol=True, has_nv_info=info_k is not None,
        args=tuple(KernelArg(f"param{o}", off, size, "by_value") for o, off, size in args),
        registers=regs, static_shared_bytes=smem, local_bytes=frame,
        max_threads_per_block=max_threads, param_bytes=params,
        text_bytes=text.data_size if text is not None else 0)


# ---- PTX listing statistics (the keys of compile.isa.isa_stats that apply) ------------------

_INSTR = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][\w.:]*)")
_LABEL = re.compile(r"^\s*\$?([\w$]+):")
_BRANCH = re.compile(r"^\s*(?:@!?%\w+\s+)?bra(?:\.uni)?\s+\$?([\w$]+);")


def _instructions(ptx: str) -> tuple[list[str], dict[str, int]]:
    """PTX instruction mnemonics in order and label -> index of the next instruction."""
    code: list[str] = []
    labels: dict[str, int] = {}
    in_body = False
    for raw in ptx.splitlines():
        line = raw.split("//", 1)[0].rstrip()
        if not line.strip():
            continue
        if line.strip() == "{":
            in_body = True
            continue
        if line.strip() == "}":
            in_body = False
            continue
        if not in_body:
            continue
        lab = _LABEL.match(line)
        if lab:
            labels[lab.group(1)] = len(code)
            continue
        m = _INSTR.match(line)
        if m and not m.group(1).startswith("."):
            code.append(line.strip())
    return code, labels


def _mnemonic(line: str) -> str:
    m = _INSTR.match(line)
    return m.group(1) if m else ""


# the count an async wait leaves in flight: PTX's cp.async.wait_group N (wait_all: 0), and
# SASS's DEPBAR.LE SB0, N (cp.async's scoreboard)
_PTX_WAIT = re.compile(r"cp\.async\.wait_group\s+(\d+)")
_SASS_WAIT = re.compile(r"DEPBAR\.LE\s+SB0\s*,\s*(0x[0-9a-f]+|\d+)")


def _main_span(names: list[str], loops: list[tuple[int, int]], cas, is_mma
               ) -> tuple[int, int] | None:
    """The main loop of ``_cas_and_main_loop`` as its (first, last) instruction index."""
    others = [lp for lp in loops if lp not in cas]
    return max(others, key=lambda lp: main_loop_rank(
        sum(is_mma(names[j]) for j in range(lp[0], lp[1] + 1)), lp[0], lp[1]), default=None)


def _wait_depth(code: list[str], main: tuple[int, int] | None, pattern: re.Pattern) -> int:
    """The largest count an async wait of the main loop leaves in flight (0: none, or a
    wait for all): ``isa_stats``' ``main_loop_async_wait_depth``."""
    if main is None:
        return 0
    got = [pattern.search(code[j]) for j in range(main[0], main[1] + 1)]
    return max((int(m.group(1), 0) for m in got if m), default=0)


def _cas_and_main_loop(names: list[str], loops: list[tuple[int, int]], is_cas, is_mma
                       ) -> tuple[list[tuple[int, int]], Counter]:
    """The loops (first, last instruction index) holding a compare-and-swap, and the
    mnemonic counts of the main loop: the greatest of the others by ``main_loop_rank``, the
    order the AMD listing's reader takes too (the async loop's steady state before its
    checked tail)."""
    cas = [lp for lp in loops if any(is_cas(names[j]) for j in range(lp[0], lp[1] + 1))]
    main = _main_span(names, loops, cas, is_mma)
    return cas, Counter(names[main[0]:main[1] + 1]) if main else Counter()


def ptx_stats(ptx: str) -> dict[str, int]:
    """Instruction counts of a PTX listing under the keys ``verify`` reads
    (``pipeline.verify.isa_problems``): MMAs, async copies and waits, barriers, atomics by
    kind, fences, CAS loops, shared reads (``ld.shared`` and ``ldmatrix``) and writes, and the
    main loop's (the loop with the most MMAs)."""
    code, labels = _instructions(ptx)
    names = [_mnemonic(c) for c in code]
    n = Counter(names)

    def tally(pred, counter=n) -> int:
        return sum(v for k, v in counter.items() if pred(k))

    loops = []
    for i, c in enumerate(code):
        b = _BRANCH.match(c)
        if b and b.group(1) in labels and labels[b.group(1)] <= i:
            loops.append((labels[b.group(1)], i))

    def is_mma(m: str) -> bool:
        return m.startswith(("mma.", "wgmma."))

    def is_cas(m: str) -> bool:
        return m.startswith("atom.") and ".cas" in m

    cas, body = _cas_and_main_loop(names, loops, is_cas, is_mma)
    main = _main_span(names, loops, cas, is_mma)

    def is_atomic(m: str) -> bool:
        return m.startswith(("red.", "atom.")) and ".global" in m

    s = {
        "instructions": len(code),
        "mma": tally(is_mma),
        "async_copies": tally(lambda m: m.startswith("cp.async.") and "wait" not in m
                              and "commit" not in m),
        "async_waits": tally(lambda m: m.startswith("cp.async.wait")),
        "barriers": tally(lambda m: m.startswith(("bar.", "barrier."))),
        "global_atomics": tally(is_atomic),
        "global_atomic_add_f32": tally(lambda m: is_atomic(m) and m.endswith(".add.f32")),
        "global_atomic_pk_add_f16": tally(lambda m: is_atomic(m) and m.endswith(".f16x2")),
        "global_atomic_pk_add_bf16": tally(lambda m: is_atomic(m) and m.endswith(".bf16x2")),
        "global_atomic_cmpswap": tally(is_cas),
        "device_cache_ops": tally(lambda m: m.startswith(("fence.", "membar."))),
        "cas_loops": len(cas),
        "ds_loads": tally(lambda m: m.startswith(("ld.shared", "ldmatrix"))),
        "ds_stores": tally(lambda m: m.startswith("st.shared")),
        "global_loads": tally(lambda m: m.startswith("ld.global")),
        "global_stores": tally(lambda m: m.startswith("st.global")),
        "scratch_ops": tally(lambda m: m.startswith(("ld.local", "st.local"))),
        "loops": len(loops),
    }
    s.update({
        "main_loop_instructions": sum(body.values()),
        "main_loop_mma": tally(is_mma, body),
        "main_loop_barriers": tally(lambda m: m.startswith(("bar.", "barrier.")), body),
        "main_loop_async_copies": tally(lambda m: m.startswith("cp.async.") and "wait" not in m
                                        and "commit" not in m, body),
        "main_loop_ds_loads": tally(lambda m: m.startswith(("ld.shared", "ldmatrix")), body),
        "main_loop_ds_loads_tr": tally(lambda m: m.startswith("ldmatrix") and ".trans" in m,
                                       body),
        "main_loop_ds_stores": tally(lambda m: m.startswith("st.shared"), body),
        "main_loop_global_loads": tally(lambda m: m.startswith("ld.global"), body),
        "main_loop_async_wait_depth": _wait_depth(code, main, _PTX_WAIT),
    })
    return s


# ---- SASS (nvdisasm) statistics: what structure derives from a stored cubin -----------------

_SASS_LINE = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]\s+)?([A-Z][A-Za-z0-9_.]*)"
                        r"([^;]*);")
_SASS_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_SASS_BRA = re.compile(r"(\.L_x_\d+)\b")


_LISTINGS: dict[str, str] = {}  # sha256 of a cubin -> its listing (``prefetch_listings``)


def prefetch_listings(blobs: list[bytes], workers: int = 0) -> None:
    """Disassemble ``blobs`` in parallel threads (nvdisasm is a process each, ~0.3 s, most
    of it start-up) so that ``disassemble_cubin`` of each is a lookup: ``verify``'s
    structure level of a whole sm_90 cache went from ~10 min to ~minutes/cores."""
    import hashlib
    import os
    from concurrent.futures import ThreadPoolExecutor

    todo = {hashlib.sha256(b).hexdigest(): b for b in blobs}
    todo = {k: b for k, b in todo.items() if k not in _LISTINGS}

    def one(item):
        k, b = item
        try:
            return k, _nvdisasm(b)
        except ValueError:
            return k, None  # disassemble_cubin raises it again, in order
    with ThreadPoolExecutor(workers or os.cpu_count() or 1) as pool:
        for k, text in pool.map(one, todo.items()):
            if text is not None:
                _LISTINGS[k] = text


def disassemble_cubin(data: bytes) -> str:
    """nvdisasm's listing of a cubin (ValueError when nvdisasm refuses it; ToolchainError
    from discovery when there is none); a prefetched listing is taken once."""
    import hashlib

    got = _LISTINGS.pop(hashlib.sha256(bytes(data)).hexdigest(), None)
    return got if got is not None else _nvdisasm(data)


def _nvdisasm(data: bytes) -> str:
    import subprocess
    import tempfile
    from pathlib import Path

    from wgradcache.compile.discovery import find_nvdisasm

    tool = find_nvdisasm()
    with tempfile.TemporaryDirectory(prefix="wgradcache-nvdisasm-") as d:
        f = Path(d) / "k.cubin"
        f.write_bytes(bytes(data))
        out = subprocess.run([str(tool), "-c", str(f)], capture_output=True, text=True,
                             timeout=120)
    if out.returncode != 0:
        raise ValueError(f"nvdisasm refused the cubin: {(out.stderr or out.stdout).strip()}")
    return out.stdout


def sass_stats(sass: str) -> dict[str, int]:
    """Instruction counts of an nvdisasm listing under the keys ``verify`` reads (as
    ``ptx_stats``): HMMA, LDGSTS and its barriers, BAR, global atomics by kind (RED/ATOMG),
    fences (MEMBAR/FENCE), CAS loops, shared/global/local accesses (STL/LDL: spills), and
    the main loop's (the backward branch with the most HMMAs)."""
    names: list[str] = []
    ops: list[str] = []
    lines: list[str] = []
    labels: dict[str, int] = {}
    for line in sass.splitlines():
        lab = _SASS_LABEL.match(line)
        if lab:
            labels[lab.group(1)] = len(names)
            continue
        m = _SASS_LINE.match(line)
        if m:
            names.append(m.group(1))
            ops.append(m.group(2))
            lines.append(line)
    loops = []
    for i, (nm, op) in enumerate(zip(names, ops, strict=True)):
        b = _SASS_BRA.search(op) if nm.startswith("BRA") else None
        if b and b.group(1) in labels and labels[b.group(1)] <= i:
            loops.append((labels[b.group(1)], i))
    n = Counter(names)

    def tally(pred, counter=n) -> int:
        return sum(v for k, v in counter.items() if pred(k))

    def is_mma(m: str) -> bool:
        return m.startswith(("HMMA", "HGMMA"))

    def is_atomic(m: str) -> bool:
        return m.startswith(("RED", "ATOMG"))

    def is_cas(m: str) -> bool:
        return m.startswith("ATOMG") and "CAS" in m

    def is_bar(m: str) -> bool:
        return m.startswith("BAR")

    def is_async(m: str) -> bool:
        return m.startswith("LDGSTS")

    def is_global_load(m: str) -> bool:  # LDGDEPBAR is cp.async's commit, not a load
        return m.startswith("LDG") and not is_async(m) and not m.startswith("LDGDEPBAR")

    cas, body = _cas_and_main_loop(names, loops, is_cas, is_mma)
    main = _main_span(names, loops, cas, is_mma)
    s = {
        "instructions": len(names),
        "mma": tally(is_mma),
        "async_copies": tally(is_async),
        "async_waits": tally(lambda m: m.startswith(("LDGDEPBAR", "DEPBAR"))),
        "barriers": tally(is_bar),
        "global_atomics": tally(is_atomic),
        "global_atomic_add_f32": tally(lambda m: is_atomic(m) and ".ADD.F32" in m),
        "global_atomic_pk_add_f16": tally(lambda m: is_atomic(m) and ".F16x2" in m),
        "global_atomic_pk_add_bf16": tally(lambda m: is_atomic(m) and ".BF16x2" in m),
        "global_atomic_cmpswap": tally(is_cas),
        "device_cache_ops": tally(lambda m: m.startswith(("MEMBAR", "FENCE", "CCTL"))),
        "cas_loops": len(cas),
        "ds_loads": tally(lambda m: m.startswith("LDS")),
        "ds_stores": tally(lambda m: m.startswith("STS")),
        "global_loads": tally(is_global_load),
        "global_stores": tally(lambda m: m.startswith("STG")),
        "scratch_ops": tally(lambda m: m.startswith(("LDL", "STL"))),
        "spill_stores": tally(lambda m: m.startswith("STL")),
        "spill_loads": tally(lambda m: m.startswith("LDL")),
        "loops": len(loops),
    }
    s.update({
        "main_loop_instructions": sum(body.values()),
        "main_loop_mma": tally(is_mma, body),
        "main_loop_barriers": tally(is_bar, body),
        "main_loop_async_copies": tally(is_async, body),
        "main_loop_ds_loads": tally(lambda m: m.startswith("LDS"), body),
        "main_loop_ds_loads_tr": tally(lambda m: m.startswith("LDSM") and ".MT" in m, body),
        "main_loop_ds_stores": tally(lambda m: m.startswith("STS"), body),
        "main_loop_global_loads": tally(is_global_load, body),
        "main_loop_scratch_ops": tally(lambda m: m.startswith(("LDL", "STL")), body),
        "main_loop_async_wait_depth": _wait_depth(lines, main, _SASS_WAIT),
    })
    return s
