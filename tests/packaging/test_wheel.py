"""An installed wheel works: it carries its data and runs from any directory.

An editable install reads the source tree, so only a real wheel shows a file that is not
packaged: ``count`` once read ``<site-packages>/../geometries.yaml`` and failed. The test
builds the wheel from a copy of the sources, installs it into a fresh venv (dependencies from
the system site, nothing downloaded), and runs ``count`` and a one-job ``build`` elsewhere.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.packaging  # ~15 s: builds, installs and runs a wheel


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 300):
    r = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, f"{' '.join(map(str, argv))}\n{r.stdout}\n{r.stderr}"
    return r.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv bin directory, environment, wheel path) of a fresh install of this tree."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "tree"  # what an sdist holds; building here leaves the checkout alone
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "src", src / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "WGRADCACHE_GEOMETRIES", "VIRTUAL_ENV")}
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
          "--no-index", "-q", "-w", str(tmp / "dist"), str(src)], tmp, env)
    (wheel,) = (tmp / "dist").glob("wgradcache-*.whl")
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], tmp, env)
    bindir = venv / "bin"
    # --ignore-installed: the system site holds this project's editable install
    _run([str(bindir / "python"), "-m", "pip", "install", "--no-deps", "--no-index",
          "--ignore-installed", "-q", str(wheel)], tmp, env)
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    return bindir, env, wheel


def test_wheel_carries_the_data_the_package_reads(installed):
    _, _, wheel = installed
    zf = zipfile.ZipFile(wheel)
    names = set(zf.namelist())
    assert {"wgradcache/data/geometries.yaml", "wgradcache/compile/native.cpp"} <= names
    # the root file, the one users edit, byte for byte
    assert zf.read("wgradcache/data/geometries.yaml") == (ROOT / "geometries.yaml").read_bytes()
    assert not any(n.startswith(("tests/", "geometries.yaml")) for n in names)


def test_installed_count_and_build_run_from_elsewhere(installed, tmp_path):
    bindir, env, _ = installed
    where = _run([str(bindir / "python"), "-c", "import wgradcache; print(wgradcache.__file__)"],
                 tmp_path, env)
    assert Path(where.strip()).is_relative_to(bindir.parent), where  # not the source tree

    doc = json.loads(_run([str(bindir / "wgradcache"), "count", "--json"], tmp_path, env))
    from wgradcache.jobs import count_table, resolve_selection

    assert doc == count_table(resolve_selection())  # the shipped file, as in the tree
    assert doc["total"] > 0

    out = _run([str(bindir / "wgradcache"), "build", "--target", "gfx1250", "--limit", "1",
                "--cache-dir", str(tmp_path / "cache"), "--json"], tmp_path, env)
    summary = json.loads(out.strip().splitlines()[-1])
    assert (summary["target"], summary["jobs"], summary["built"], summary["failed"]) == (
        "gfx1250", 1, 1, 0)
    entries = list((tmp_path / "cache").rglob("*.json"))
    assert entries, "the build published nothing"


def test_the_nvidia_extra_installs_and_sm90_is_buildable(installed, tmp_path):
    """``pip install 'wgradcache[nvidia]'`` from the built wheel: the extra names ptxas's,
    nvdisasm's and cuda-bindings' distributions (resolved from the system site, nothing
    downloaded), and ``toolchain`` in that venv finds sm_90 buildable."""
    bindir, env, wheel = installed
    _run([str(bindir / "python"), "-m", "pip", "install", "--no-index", "-q",
          f"wgradcache[nvidia] @ {wheel.as_uri()}"], tmp_path, env)
    needs = _run([str(bindir / "python"), "-c",
                  "import importlib.metadata as m; print('\\n'.join(r for r in "
                  "m.requires('wgradcache') if 'nvidia' in r))"], tmp_path, env)
    extra = sorted(ln.split(";")[0].split(">=")[0] for ln in needs.splitlines()
                   if ln.endswith('extra == "nvidia"'))
    assert extra == ["cuda-bindings", "nvidia-cuda-nvcc", "nvidia-cuda-nvdisasm"], needs
    assert 'wgradcache[nvidia]; extra == "test"' in needs.splitlines()  # test reuses it
    doc = json.loads(_run([str(bindir / "wgradcache"), "toolchain", "--target", "sm_90",
                           "--json"], tmp_path, env))
    assert doc["targets"]["sm_90"]["buildable"] is True, doc["targets"]
    assert [t["tool"] for t in doc["targets"]["sm_90"]["tools"]] == ["codegen", "ptxas",
                                                                     "nvdisasm"]
