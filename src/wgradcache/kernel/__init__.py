"""The kernel IR and its two consumers (DESIGN §5).

``ir`` (types, ops, KernelDef), ``builder`` (KernelBuilder: how generators write kernels),
``verify`` (the IR's rules), ``mma`` (per-lane maps of the matrix atoms), ``emulate`` (numpy
SIMT emulator with hazard checks), ``lower_llvm`` (LLVM IR text per target).
"""
