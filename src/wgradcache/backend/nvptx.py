"""NVIDIA's backend: the NVPTX lowering, LLVM's NVPTX codegen to PTX and ptxas to the cubin,
the cubin's ELF read for its record, SASS statistics through nvdisasm, cuda-bindings."""

from __future__ import annotations

from wgradcache.backend.amdgpu import RECORD_FIELDS as AMD_NAMED
from wgradcache.model.backends import Backend, register

__all__ = ["NVPTX", "RECORD_FIELDS"]

# ``compile.cubin.CubinInfo.record``: the cubin's facts in NVIDIA's words, the dynamic shared
# bytes a launch passes, the parameters by their ABI names (a test keeps them equal)
RECORD_FIELDS: dict[str, type] = {
    "e_flags": int, "sm": int, "target": str, "symbol": str, "has_symbol": bool,
    "has_nv_info": bool, "args": list, "registers": int, "static_shared_bytes": int,
    "dynamic_shared_bytes": int, "local_bytes": int, "max_threads_per_block": int,
    "param_bytes": int, "text_bytes": int,
}
# sm_90 records before they spoke NVIDIA's words: the AMD ELF note's fields, the cubin's
# values under them (sgpr/agpr/spill counts 0, wavefront 32, code object version 0) and the
# parameters by ordinal; ``upgrade_record`` renames them
_RENAMED = {"e_flags": "e_flags", "mach": "sm", "target": "target", "symbol": "symbol",
            "has_symbol": "has_symbol", "has_descriptor": "has_nv_info",
            "vgpr_count": "registers", "group_segment_fixed_size": "static_shared_bytes",
            "private_segment_fixed_size": "local_bytes",
            "max_flat_workgroup_size": "max_threads_per_block",
            "kernarg_segment_size": "param_bytes", "text_bytes": "text_bytes"}


class Nvptx(Backend):
    name = "nvptx"
    blob_suffix = ".cubin"
    blob_magic = b"\x7fELF"
    runtime = "cuda"
    tools = ("llvm-nvptx", "ptxas", "nvdisasm")
    names_kernel_args = False  # a cubin's parameters are ordinals (param<i>)
    record_fields = RECORD_FIELDS
    legacy_record_fields = AMD_NAMED

    @property
    def llvm_triple(self) -> str:
        from wgradcache.kernel.lower_nvptx import NV_TRIPLE

        return NV_TRIPLE

    def lower(self, kd, target: str) -> str:
        from wgradcache.kernel.lower_nvptx import lower_nvptx

        return lower_nvptx(kd, target)

    def compile(self, ir_text: str, target: str, options, listing: str):
        from wgradcache.compile.codegen import compile_nvptx

        return compile_nvptx(ir_text, target, options, listing)

    def toolchain_identity(self):
        from wgradcache.compile.toolchain import codegen_backend, nvptx_identity

        return nvptx_identity(codegen_backend())

    def read_code_object(self, data: bytes):
        from wgradcache.compile.cubin import read_cubin

        return read_cubin(data)

    def upgrade_record(self, old: dict, facts) -> dict:
        names = facts.arg_names
        new = {n: old[o] for o, n in _RENAMED.items()}
        new["args"] = [{**a, "name": names[i]} if i < len(names) else a
                       for i, a in enumerate(old["args"])]
        new["dynamic_shared_bytes"] = facts.dynamic_shared_bytes
        return new

    def isa_stats(self, listing: str, kind: str = "disassembly") -> dict[str, int]:
        from wgradcache.compile.cubin import ptx_stats, sass_stats

        # the build's listing is nvdisasm's SASS; ``compile`` lists the PTX
        return ptx_stats(listing) if kind == "ptx" else sass_stats(listing)

    def stored_listing(self, data: bytes, target: str) -> str:
        from wgradcache.compile.cubin import disassemble_cubin

        return disassemble_cubin(data)

    def disassembler_missing(self) -> str:
        from wgradcache.compile.discovery import ToolchainError, find_nvdisasm

        try:
            find_nvdisasm()
        except ToolchainError as e:
            return f"the SASS statistics of the stored cubins cannot be derived: {e}"
        return ""

    def prefetch_listings(self, blobs: list[bytes]) -> None:
        from wgradcache.compile.cubin import prefetch_listings

        prefetch_listings(blobs)  # nvdisasm is a process per cubin: in parallel

    def summary_line(self, co: dict, tail: str) -> str:
        return (f"registers {co['registers']}, shared {co['static_shared_bytes']} B "
                f"static + {co['dynamic_shared_bytes']} B dynamic, local "
                f"{co['local_bytes']} B, max threads {co['max_threads_per_block']}; {tail}")

    def resource_rows(self, co: dict) -> list[tuple[str, object]]:
        # a cubin has one register file (no sgpr/agpr) and no spill counts of its own: a
        # spill is local memory, which the frame counts
        rows = (("registers", "registers"), ("static shared bytes", "static_shared_bytes"),
                ("dynamic shared bytes", "dynamic_shared_bytes"),
                ("local (stack) bytes", "local_bytes"),
                ("max threads per block", "max_threads_per_block"))
        return [(name, co[f]) for name, f in rows if co.get(f) is not None]

    def device_for(self, target: str):
        from wgradcache.runtime.cuda import device_for

        return device_for(target)

    def resident_ctas(self, co: dict, target: str) -> int | None:
        """The occupancy calculator's block count: registers per warp rounded up to the
        allocation unit, shared memory plus the per-block reserve, threads and the block
        cap of the SM, the least of them. None for a record without the fields (or
        values no cubin has)."""
        from wgradcache.model.devices import device_size

        lim = device_size(target).cu_limits
        got = [co.get(k) for k in ("registers", "static_shared_bytes", "dynamic_shared_bytes",
                                   "max_threads_per_block")]
        if lim is None or not all(type(v) is int and v >= 0 for v in got):
            return None
        regs, static, dynamic, threads = got
        if threads <= 0:
            return None
        warps = -(-threads // 32)
        per_warp = -(-regs * 32 // lim.register_unit) * lim.register_unit
        by_regs = lim.registers // (per_warp * warps) if per_warp else lim.ctas
        by_shared = lim.shared_bytes // (static + dynamic + lim.shared_per_cta)
        return max(1, min(by_regs, by_shared, lim.threads // threads, lim.ctas))


NVPTX = register(Nvptx())
