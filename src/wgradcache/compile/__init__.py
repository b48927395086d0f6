"""Compile: LLVM IR text -> code object, in worker processes. ``discovery`` finds the tools,
``toolchain`` names them (the identity every content key includes), ``codegen`` runs them,
``codeobject``/``isa``/``disasm`` read what they made."""
