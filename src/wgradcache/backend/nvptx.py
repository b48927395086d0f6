"""NVIDIA's backend: the NVPTX lowering, LLVM's NVPTX codegen to PTX and ptxas to the cubin,
the cubin's ELF read for its record, SASS statistics through nvdisasm, cuda-bindings."""

from __future__ import annotations

from wgradcache.model.backends import Backend, register

__all__ = ["NVPTX"]


class Nvptx(Backend):
    name = "nvptx"
    blob_suffix = ".cubin"
    blob_magic = b"\x7fELF"
    runtime = "cuda"
    tools = ("llvm-nvptx", "ptxas", "nvdisasm")
    names_kernel_args = False  # a cubin's parameters are ordinals (param<i>)

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
        from wgradcache.compile.codeobject import read_code_object

        return read_code_object(data)

    def isa_stats(self, listing: str) -> dict[str, int]:
        from wgradcache.compile.isa import isa_stats

        return isa_stats(listing)

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

    def summary_line(self, co: dict, dynamic_lds: int, tail: str) -> str:
        return (f"registers {co['vgpr_count']}, shared {co['group_segment_fixed_size']} B "
                f"static + {dynamic_lds} B dynamic, local "
                f"{co['private_segment_fixed_size']} B, max threads "
                f"{co['max_flat_workgroup_size']}; {tail}")

    def resource_rows(self, co: dict, dynamic_lds: int) -> list[tuple[str, object]]:
        # a cubin has one register file (no sgpr/agpr) and no spill counts of its own: a
        # spill is local memory, which the frame counts
        rows = [(name, co[f]) for name, f in (
            ("registers", "vgpr_count"), ("static shared bytes", "group_segment_fixed_size"))
            if co.get(f) is not None]
        rows.append(("dynamic shared bytes", dynamic_lds))
        return rows + [(name, co[f]) for name, f in (
            ("local (stack) bytes", "private_segment_fixed_size"),
            ("max threads", "max_flat_workgroup_size")) if co.get(f) is not None]

    def device_for(self, target: str):
        from wgradcache.runtime.cuda import device_for

        return device_for(target)


NVPTX = register(Nvptx())
