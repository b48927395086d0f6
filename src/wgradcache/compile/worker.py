"""Child-process entry of ``isolate.compile_isolated``: ``python -m wgradcache.compile.worker``.

Reads one pickled request on stdin, runs ``codegen.compile_ir`` and writes one pickled reply
on the stdout it was started with. LLVM may abort or exit this process before any reply: the
parent then reads LLVM's message from our stderr. fd 1 is pointed at stderr while compiling,
so nothing LLVM or a library prints can corrupt the reply. It ends when its parent dies.
"""

from __future__ import annotations

import os
import pickle
import sys


def main() -> int:
    from wgradcache.compile.lifetime import end_with_parent

    end_with_parent()  # a killed build leaves no codegen behind
    request = pickle.loads(sys.stdin.buffer.read())
    reply_fd = os.dup(1)
    os.dup2(2, 1)
    try:
        from wgradcache.compile.codegen import CodegenOptions, compile_ir

        obj = compile_ir(request["ir"], request["target"],
                         CodegenOptions(**request["options"]), listing=request["listing"])
        reply = ("ok", obj)
    except Exception as e:  # every Python-side failure is a reply, not a crash
        reply = ("error", f"{type(e).__name__}: {e}")
    with os.fdopen(reply_fd, "wb") as out:
        pickle.dump(reply, out, protocol=pickle.HIGHEST_PROTOCOL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
