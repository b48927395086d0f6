"""A third backend added from the test tree (``toy_backend.py``: a catalog entry and an object
whose codegen writes the LLVM IR text) builds, verifies and lists through the unchanged
pipeline: no stage asks which vendor a target is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "WGRADCACHE_BACKENDS": "toy_backend",
           "PYTHONPATH": os.pathsep.join([str(SRC), str(HERE)])}
    return subprocess.run([sys.executable, "-m", "wgradcache", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_toy_backend_builds_verifies_and_lists(tmp_path):
    cache = str(tmp_path / "cache")
    built = _cli("build", "--target", "toy1151", "--limit", "2", "--jobs", "1",
                 "--cache-dir", cache, "--json", cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    summary = json.loads(built.stdout.splitlines()[-1])
    assert (summary["target"], summary["built"], summary["failed"]) == ("toy1151", 2, 0)
    blobs = sorted((tmp_path / "cache" / "toy1151" / "blobs").glob("*.toyir"))
    assert len(blobs) == 2
    assert all(b.read_bytes().startswith(b'; ModuleID = "') for b in blobs)
    assert b'define amdgpu_kernel void @"' in blobs[0].read_bytes()

    verified = _cli("verify", "--from-cache", "--target", "toy1151", "--level", "integrity",
                    "--cache-dir", cache, cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.startswith("verify --level integrity: ok\n")
    assert verified.stdout.endswith("checked 2, failed 0\n")

    listed = _cli("ls", "--target", "toy1151", "--cache-dir", cache, "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert len(rows) == 2 and all(r["label"].startswith("toy1151-") for r in rows)

    # its labels are labels: the target's name is the catalog's, not a vendor's pattern
    shown = _cli("show", rows[0]["label"], "--cache-dir", cache, cwd=tmp_path)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert shown.stdout.startswith(rows[0]["label"] + "\n")


def test_without_the_module_the_toy_target_is_unknown(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop("WGRADCACHE_BACKENDS", None)
    r = subprocess.run([sys.executable, "-m", "wgradcache", "build", "--target", "toy1151",
                        "--limit", "1", "--cache-dir", str(tmp_path)], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "unknown target 'toy1151'" in r.stderr
