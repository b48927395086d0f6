"""Codegen in a child process, so that LLVM killing its process does not kill ours.

LLVM ends the process on some errors (llvm22-amdgpu-facts.md, "How failures show up"): an
intrinsic the target cannot select aborts (``LLVM ERROR: Cannot select``, SIGABRT), and LDS
over the target's limit exits with status 1 (``error: <unknown>:0:0: local memory (N)
exceeds limit (M) in function 'k'``). Neither reaches Python. ``compile_isolated`` runs
``compile_ir`` in ``python -m wgradcache.compile.worker`` and turns every way that can end
(reply, Python error, abort, exit, timeout) into a ``CompileOutcome`` with LLVM's own words.

This costs a Python start-up (~0.2 s) per call, so it is for one-off compiles (the CLI,
probes, tests). The build keeps long-lived joblib/loky workers calling ``compile_ir`` and
handles their death itself.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from wgradcache.compile.codegen import CodegenOptions, CompiledObject
from wgradcache.compile.lifetime import PARENT_ENV

__all__ = ["CompileOutcome", "IsolatedCompile", "compile_isolated", "llvm_error_message"]

_MAX_MESSAGE = 2000


@dataclass(frozen=True)
class CompileOutcome:
    ok: bool
    obj: CompiledObject | None
    error: str  # empty when ok


def llvm_error_message(stderr: str) -> str:
    """The lines of LLVM's report that say what went wrong, without the stack dump.

    Keeps ``LLVM ERROR: ...`` and ``error: ...`` lines, and the "Running pass ... on
    function" context that an abort prints; otherwise the last line printed.
    """
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    keep = [ln for ln in lines if ln.startswith("LLVM ERROR:") or "error:" in ln]
    keep += [ln for ln in lines if "Running pass" in ln and "on function" in ln][:1]
    msg = " | ".join(keep) if keep else (lines[-1] if lines else "")
    return msg[:_MAX_MESSAGE]


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"codegen process killed by {name}"
    return f"codegen process exited with status {returncode}"


def _env() -> dict[str, str]:
    """The parent's environment, with our package importable even when not installed, and
    our pid: the child ends when we die (``lifetime.end_with_parent``), so a killed build
    leaves no codegen running in its own session."""
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    env[PARENT_ENV] = str(os.getpid())
    return env


class IsolatedCompile:
    """A ``compile_ir`` started in a child process now, collected with ``outcome()``.

    Starting early lets a caller overlap a few one-off compiles (the build's stage-2
    kernels) with other work. The timeout runs from ``outcome()``.
    """

    def __init__(self, ir_text: str, target: str, options: CodegenOptions | None = None,
                 timeout: float = 300, *, listing: str = "auto"):
        request = pickle.dumps({"ir": ir_text, "target": target, "listing": listing,
                                "options": (options or CodegenOptions()).to_dict()})
        self.timeout = timeout
        self.proc = subprocess.Popen([sys.executable, "-m", "wgradcache.compile.worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=_env(),
                                     start_new_session=True)
        # The child reads its request before importing anything: a write larger than the
        # pipe waits only for its interpreter to start.
        stdin, self.proc.stdin = self.proc.stdin, None  # so communicate() leaves it alone
        try:
            stdin.write(request)
        except BrokenPipeError:
            pass  # it died already: outcome() reports how
        finally:
            with contextlib.suppress(BrokenPipeError):
                stdin.close()

    def done(self) -> bool:
        """Whether ``outcome()`` would return without waiting on the compile: the child
        has begun its reply or exited (its stdout carries nothing else)."""
        readable, _, _ = select.select([self.proc.stdout], [], [], 0)
        return bool(readable)

    def cancel(self) -> None:
        """Kill the child and its tools (its own process group) if it still runs."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.communicate()

    def outcome(self) -> CompileOutcome:
        """Wait for the child; never raises for a failed compile."""
        proc = self.proc
        try:
            out, err = proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.cancel()
            return CompileOutcome(False, None, f"codegen timed out after {self.timeout:g} s; "
                                               "the process was killed")
        stderr = err.decode(errors="replace")
        if proc.returncode == 0 and out:
            status, payload = pickle.loads(out)
            if status == "ok":
                return CompileOutcome(True, payload, "")
            return CompileOutcome(False, None, payload)
        detail = llvm_error_message(stderr)
        return CompileOutcome(False, None, f"{_describe_exit(proc.returncode)}: {detail}"
                              if detail else _describe_exit(proc.returncode))


def compile_isolated(ir_text: str, target: str, options: CodegenOptions | None = None,
                     timeout: float = 300, *, listing: str = "auto") -> CompileOutcome:
    """``compile_ir`` in a child process; never raises for a failed compile.

    A timeout kills the child and its tools (its own process group) and says so.
    """
    return IsolatedCompile(ir_text, target, options, timeout, listing=listing).outcome()
