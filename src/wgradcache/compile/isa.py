"""ISA statistics from an AMDGPU listing: what the compiler actually emitted.

The cache records, per kernel, how many MMAs, async copies, barriers, atomics and cache
maintenance instructions its code holds; tests use the same counts to check a variant's
promise (a packed atomic is native on gfx1250 and a CAS loop on gfx1151; the async loop
has one barrier per K step; monotonic atomics add no fences).

Two listings are accepted and give identical statistics (tested): LLVM's assembly
(``emit_assembly``: labels ``.LBB0_1:``, directives, the metadata block) and
``llvm-objdump -d --symbolize-operands`` (labels ``<L0>:``, ``// address`` comments,
padding). Only instruction lines count, and never ``s_nop``/``s_code_end`` (see _PADDING).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple

from wgradcache.compile.loop_rank import main_loop_rank

__all__ = ["Instruction", "Loop", "parse_listing", "find_loops", "isa_stats", "mma_per_loop",
           "main_loop", "ds_access_bytes"]

# Blocks of directives whose lines are not code (the metadata YAML, the kernel descriptor).
_SKIP_BLOCKS = {".amdgpu_metadata": ".end_amdgpu_metadata",
                ".amdhsa_kernel": ".end_amdhsa_kernel"}
_MNEMONIC = re.compile(r"^[a-z][a-z0-9_]*$")
_OBJDUMP_LABEL = re.compile(r"^[0-9a-fA-F]+ <([^>]+)>:$")
_ASM_LABEL = re.compile(r"^([A-Za-z_.$][\w.$]*):$")
# Padding is code in a disassembly but a directive in the assembly (.p2align before a loop
# header, the .text tail: s_nop, and s_code_end on gfx10+). A disassembly cannot tell
# alignment s_nop from a hazard s_nop, so no s_nop is counted in either listing.
_PADDING = frozenset({"s_code_end", "s_nop"})

CACHE_OPS = ("global_wb", "global_inv", "global_wbinv", "buffer_wbl2", "buffer_inv",
             "buffer_gl0_inv", "buffer_gl1_inv", "buffer_wbinvl1", "buffer_wbinvl1_vol")
_CACHE_OP_SET = frozenset(CACHE_OPS)
ATOMIC_KINDS = ("global_atomic_pk_add_f16", "global_atomic_pk_add_bf16",
                "global_atomic_add_f32")


class Instruction(NamedTuple):
    """One instruction line (a tuple: built ~2000 times per kernel, at C speed)."""

    mnemonic: str
    operands: str


@dataclass(frozen=True)
class Loop:
    """A backward branch and the instructions from its target label to the branch."""

    start: int  # index of the first instruction of the body
    end: int  # index of the branch
    branch: str

    def body(self, code: list[Instruction]) -> list[Instruction]:
        return code[self.start:self.end + 1]


def _strip_comment(line: str) -> str:
    for mark in ("//", ";"):
        i = line.find(mark)
        if i >= 0:
            line = line[:i]
    return line.strip()


_IS_MNEMONIC: dict[str, bool] = {}  # head -> counted as an instruction (a few dozen heads)


def _counts(head: str) -> bool:
    ok = _IS_MNEMONIC.get(head)
    if ok is None:
        ok = _IS_MNEMONIC[head] = (head[0] != "." and head not in _PADDING
                                   and _MNEMONIC.match(head) is not None)
    return ok


def parse_listing(text: str) -> tuple[list[Instruction], dict[str, int]]:
    """Instructions in order, and each label's index (the instruction that follows it)."""
    code: list[Instruction] = []
    labels: dict[str, int] = {}
    end_of_block = None
    for raw in text.splitlines():
        line = _strip_comment(raw) if ("/" in raw or ";" in raw) else raw.strip()
        if not line:
            continue
        head, _, operands = line.partition(" ")
        if "\t" in head:
            head, _, rest = head.partition("\t")
            operands = f"{rest} {operands}" if operands else rest
        if end_of_block:
            if head == end_of_block:
                end_of_block = None
            continue
        if head in _SKIP_BLOCKS:
            end_of_block = _SKIP_BLOCKS[head]
            continue
        if line[-1] == ":":  # only labels end with a colon
            m = _OBJDUMP_LABEL.match(line) or _ASM_LABEL.match(line)
            if m:
                labels[m.group(1)] = len(code)
            continue
        if _counts(head):
            code.append(Instruction(head, operands.strip()))
    return code, labels


def _is_branch(mnemonic: str) -> bool:
    return mnemonic == "s_branch" or mnemonic.startswith("s_cbranch_")


def find_loops(code: list[Instruction], labels: dict[str, int]) -> list[Loop]:
    """Every backward branch to a label, in program order of the branch."""
    loops = []
    for j, ins in enumerate(code):
        if not _is_branch(ins.mnemonic):
            continue
        target = ins.operands.split(",")[0].strip()
        i = labels.get(target)
        if i is not None and i <= j:
            loops.append(Loop(i, j, ins.mnemonic))
    return loops


def _is_mma(m: str) -> bool:
    return m.startswith(("v_wmma_", "v_mfma_", "v_swmmac_", "v_smfmac_"))


def _is_barrier(m: str) -> bool:
    # gfx12/gfx1250 split a barrier into s_barrier_signal + s_barrier_wait: count it once.
    return m == "s_barrier" or m.startswith("s_barrier_signal")


def _is_async_copy(m: str) -> bool:
    return m.startswith("global_load_async_to_lds_")


def _is_cmpswap(m: str) -> bool:
    return "_atomic_cmpswap" in m


def _is_cas_loop(loop: Loop, code: list[Instruction]) -> bool:
    return loop.branch == "s_cbranch_execnz" and any(
        _is_cmpswap(i.mnemonic) for i in loop.body(code))


# Bytes one lane moves per LDS access, by mnemonic. gfx11+ spell them ds_load_* / ds_store_*,
# gfx9 ds_read_* / ds_write_*; the d16 forms write half a VGPR; 2addr / read2 are two accesses
# of the element width in one instruction.
_DS_WIDTH = re.compile(r"^ds_(?:load|read|store|write)(2st64|2|_2addr_stride64|_2addr)?_"
                       r"(?:tr\d+_|addtid_)?([bui])(8|16|32|64|96|128)")
_DS_TR_GFX950 = re.compile(r"^ds_read_b(64|96)_tr_b\d+$")


def ds_access_bytes(mnemonic: str) -> int:
    """Bytes per lane of one LDS load or store instruction (0 for any other instruction)."""
    m = _DS_TR_GFX950.match(mnemonic)
    if m:
        return int(m.group(1)) // 8
    m = _DS_WIDTH.match(mnemonic)
    if not m:
        return 0
    pair = 2 if m.group(1) else 1
    return pair * int(m.group(3)) // 8


def _is_ds_load(m: str) -> bool:
    return m.startswith(("ds_load", "ds_read"))


def _is_ds_store(m: str) -> bool:
    return m.startswith(("ds_store", "ds_write"))


def _is_wait(m: str) -> bool:
    # s_waitcnt* (gfx9-gfx11) and the split counters of gfx12 (s_wait_loadcnt, s_wait_dscnt,
    # s_wait_alu, ...): every instruction that stalls the wave on a counter.
    return m.startswith("s_wait")


# Scalar instructions that are no ALU work: hints, waits, barriers, branches, program end.
_NOT_SALU = ("s_wait", "s_barrier", "s_branch", "s_cbranch_", "s_delay_alu", "s_clause",
             "s_setprio", "s_sleep", "s_set_vgpr_msb", "s_endpgm", "s_nop")


def _is_salu(m: str) -> bool:
    return m.startswith("s_") and not m.startswith(_NOT_SALU)


def _is_valu(m: str) -> bool:
    return m.startswith("v_") and not _is_mma(m) and m not in ("v_nop",)


def main_loop(code: list[Instruction], labels: dict[str, int]) -> Loop | None:
    """The loop with the most MMAs that is not a CAS loop: the K loop of a GEMM kernel (its
    body, from the header label to the backward branch, holds one K tile: codegen does not
    unroll a loop of unknown trip count). Among equals, the first in program order: a K
    loop split into a steady state over whole tiles and a checked loop for the last one or
    two tiles (``kloop.async_k_loop``) runs the first for all the others. Of the backward
    branches to one header (a loop whose body branches), the outermost: the whole body."""
    others = [lp for lp in find_loops(code, labels) if not _is_cas_loop(lp, code)]
    return max(others, key=lambda lp: main_loop_rank(_count(lp.body(code), _is_mma),
                                                     lp.start, lp.end), default=None)


def mma_per_loop(asm: str) -> list[int]:
    """MMA count of every loop body (outer loops include inner ones), in program order."""
    code, labels = parse_listing(asm)
    return [sum(_is_mma(i.mnemonic) for i in lp.body(code)) for lp in find_loops(code, labels)]


def _is_device_cache_op(i: Instruction) -> bool:
    m, ops = i.mnemonic, i.operands
    if m in ("global_wb", "global_inv", "global_wbinv"):  # gfx12 / gfx1250: by scope
        return "SCOPE_DEV" in ops or "SCOPE_SYS" in ops
    if m in ("buffer_inv", "buffer_wbl2"):  # gfx94x / gfx950: sc1 is device scope
        return "sc1" in ops
    return m in ("buffer_gl1_inv", "buffer_wbinvl1", "buffer_wbinvl1_vol")  # gfx11, gfx9


def _count(code: list[Instruction], pred) -> int:
    return sum(1 for i in code if pred(i.mnemonic))


def _by_mnemonic(code: list[Instruction]) -> Counter[str]:
    return Counter(i.mnemonic for i in code)


def _tally(counts: Counter[str], pred) -> int:
    """Instructions whose mnemonic satisfies ``pred``: one test per distinct mnemonic (a
    kernel has thousands of instructions but a few dozen mnemonics)."""
    return sum(n for m, n in counts.items() if pred(m))


def isa_stats(asm: str) -> dict[str, int]:
    """Instruction counts by class of an AMDGPU listing; every key is always present (a
    stable schema for JSON). An NVIDIA listing is its backend's (``cubin.ptx_stats``,
    ``cubin.sass_stats``).

    ``main_loop_*`` describe ``main_loop``'s loop (the most MMAs, not a CAS loop: a backward
    ``s_cbranch_execnz`` over a ``*_atomic_cmpswap``); ``main_loop_async_wait_depth`` is the
    largest count its async waits leave in flight (``s_wait_asynccnt N``; NVIDIA's
    ``cp.async.wait_group N``, ``DEPBAR.LE SB0, N``; 0: a wait for all), the depth of the
    async loop's ring (``kloop.ring_wait_count``).
    """
    code, labels = parse_listing(asm)
    loops = find_loops(code, labels)
    cas = [lp for lp in loops if _is_cas_loop(lp, code)]
    n = _by_mnemonic(code)
    s: dict[str, int] = {
        "instructions": len(code),
        "mma": _tally(n, _is_mma),
        "wmma": _tally(n, lambda m: m.startswith(("v_wmma_", "v_swmmac_"))),
        "mfma": _tally(n, lambda m: m.startswith(("v_mfma_", "v_smfmac_"))),
        "async_copies": _tally(n, _is_async_copy),
        "async_waits": n["s_wait_asynccnt"],
        "global_load_lds": _tally(n, lambda m: m.startswith("global_load_lds_")),
        "barriers": _tally(n, _is_barrier),
        "global_atomics": _tally(n, lambda m: m.startswith("global_atomic_")),
        "flat_atomics": _tally(n, lambda m: m.startswith("flat_atomic_")),
        "global_atomic_cmpswap": _tally(n, lambda m: m.startswith("global_atomic_cmpswap")),
    }
    for kind in ATOMIC_KINDS:
        s[kind] = n[kind]
    for op in CACHE_OPS:
        s[op] = n[op]
    s["cache_ops"] = sum(s[op] for op in CACHE_OPS)
    # Device-scope cache maintenance: what fencing an agent-scope atomic adds. Workgroup
    # fences around an LDS barrier also invalidate caches (gfx12: global_inv SCOPE_SE,
    # gfx11: buffer_gl0_inv); those are not counted here.
    s["device_cache_ops"] = sum(1 for i in code if i.mnemonic in _CACHE_OP_SET
                                and _is_device_cache_op(i))
    s["cas_loops"] = len(cas)
    s["ds_loads"] = _tally(n, lambda m: m.startswith(("ds_load", "ds_read")))
    s["ds_stores"] = _tally(n, lambda m: m.startswith(("ds_store", "ds_write")))
    s["global_loads"] = _tally(n, lambda m: m.startswith("global_load")
                               and not m.startswith(("global_load_async_to_lds_",
                                                     "global_load_lds_")))
    s["global_stores"] = _tally(n, lambda m: m.startswith("global_store"))
    s["buffer_loads"] = _tally(n, lambda m: m.startswith("buffer_load"))
    s["buffer_stores"] = _tally(n, lambda m: m.startswith("buffer_store"))
    s["scratch_ops"] = _tally(n, lambda m: m.startswith("scratch_"))
    s["loops"] = len(loops)
    main = main_loop(code, labels)
    body = _by_mnemonic(main.body(code)) if main else Counter()
    s.update(_main_loop_stats(body))
    s["main_loop_async_wait_depth"] = max(
        (int(i.operands.split()[0], 0) for i in (main.body(code) if main else ())
         if i.mnemonic == "s_wait_asynccnt"), default=0)
    return s


def _main_loop_stats(body: Counter[str]) -> dict[str, int]:
    """One iteration of the main loop (one K tile): what feeds its MMAs and what it waits on.

    ``ds_load_narrow``: LDS reads under 16 bytes per lane (a 16-bit read per fragment element
    is the K-outer layout's cost); ``exec_branches``: ``s_cbranch_execz``/``execnz``, the
    branch around a predicated block, and ``saveexec`` the ``s_and_saveexec`` that opens it.
    """
    loads = {m: n for m, n in body.items() if _is_ds_load(m)}
    stores = {m: n for m, n in body.items() if _is_ds_store(m)}
    return {
        "main_loop_instructions": sum(body.values()),
        "main_loop_mma": _tally(body, _is_mma),
        "main_loop_barriers": _tally(body, _is_barrier),
        "main_loop_async_copies": _tally(body, _is_async_copy),
        "main_loop_ds_loads": sum(loads.values()),
        "main_loop_ds_load_bytes": sum(n * ds_access_bytes(m) for m, n in loads.items()),
        "main_loop_ds_loads_b128": sum(n for m, n in loads.items() if ds_access_bytes(m) == 16),
        "main_loop_ds_loads_narrow": sum(n for m, n in loads.items()
                                         if ds_access_bytes(m) < 16),
        "main_loop_ds_loads_b16": sum(n for m, n in loads.items() if ds_access_bytes(m) == 2),
        "main_loop_ds_loads_tr": sum(n for m, n in loads.items() if "_tr" in m),
        "main_loop_ds_stores": sum(stores.values()),
        "main_loop_ds_store_bytes": sum(n * ds_access_bytes(m) for m, n in stores.items()),
        "main_loop_global_loads": _tally(body, lambda m: m.startswith(("global_load",
                                                                       "buffer_load"))
                                         and not _is_async_copy(m)),
        "main_loop_valu": _tally(body, _is_valu),
        "main_loop_salu": _tally(body, _is_salu),
        "main_loop_exec_branches": body["s_cbranch_execz"] + body["s_cbranch_execnz"],
        "main_loop_saveexec": _tally(body, lambda m: m.startswith("s_and_saveexec")),
        "main_loop_waits": _tally(body, _is_wait),
        "main_loop_v_perm": body["v_perm_b32"],
    }
