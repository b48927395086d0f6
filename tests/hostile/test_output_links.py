"""Every output path refuses to write through a link it did not create: ``verify --junit``,
``verify --stream``, each file of ``compile --out`` and ``refresh --report-dir``'s
report.json and report.md. A symlink planted at the path (pointing at a canary's secret)
is one line and the secret stays byte for byte what it was; a hard link to the secret is
replaced, not written through (temp file + ``os.replace`` in the folder held open)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from wgradcache.cli import main

T = "gfx1250"
LABEL = "gfx1250-fp16-t32x32x32-w1x1-v8x8-sync-default-none"
LINK = "cannot write: a symbolic link, not a regular file"


@pytest.fixture
def cache(small_cache, tmp_path) -> Path:
    root = tmp_path / "cache"
    shutil.copytree(small_cache["cache"], root, symlinks=True)
    return root


def _link(canary, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(canary.dir / "secret.txt")
    canary.seal()
    return path


def _verify(small_cache, cache: Path, *extra: str):
    return CliRunner().invoke(main, ["verify", "--from-cache", "--level", "integrity",
                                     "--geometries", str(small_cache["geometries"]),
                                     "--cache-dir", str(cache), *extra])


def test_verify_junit_refuses_a_symlink(small_cache, cache, tmp_path, canary):
    out = _link(canary, tmp_path / "ci" / "junit.xml")
    r = _verify(small_cache, cache, "--junit", str(out))
    assert (r.exit_code, r.stderr.splitlines()) == (1, [f"failed: --junit {out}: {LINK}"]), \
        r.output
    assert canary.unchanged() and os.readlink(out) == str(canary.dir / "secret.txt")


def test_verify_stream_refuses_a_symlink_before_any_work(small_cache, cache, tmp_path,
                                                         canary):
    out = _link(canary, tmp_path / "stream.jsonl")
    r = _verify(small_cache, cache, "--stream", str(out))
    assert (r.exit_code, r.stdout, r.stderr.splitlines()) == (
        2, "", [f"error: --stream {out}: {LINK}"]), r.output
    assert canary.unchanged()


def test_verify_stream_and_junit_replace_a_hard_link_without_writing_through_it(
        small_cache, cache, tmp_path, canary):
    stream, junit = tmp_path / "stream.jsonl", tmp_path / "junit.xml"
    os.link(canary.dir / "secret.txt", stream)
    os.link(canary.dir / "secret.txt", junit)
    canary.seal()
    r = _verify(small_cache, cache, "--stream", str(stream), "--junit", str(junit))
    assert (r.exit_code, r.stderr) == (0, ""), r.output
    assert canary.unchanged()
    assert stream.read_bytes() == b"" and os.stat(stream).st_nlink == 1
    assert junit.read_bytes().startswith(b"<?xml version='1.0' encoding='utf-8'?>\n"
                                         b"<testsuite name=\"wgradcache.pipeline.verify\"")


@pytest.mark.parametrize("suffix", ["ll", "s", "hsaco", "json"])
def test_compile_refuses_a_symlink_at_any_file_it_writes_and_writes_none(tmp_path, canary,
                                                                         suffix):
    out = tmp_path / "out"
    _link(canary, out / f"{LABEL}.{suffix}")
    r = CliRunner().invoke(main, ["compile", LABEL, "--out", str(out)])
    assert (r.exit_code, r.stdout, r.stderr.splitlines()) == (
        2, "", [f"error: --out {out}: {LINK}"]), r.output
    assert canary.unchanged() and os.listdir(out) == [f"{LABEL}.{suffix}"]


def _plan(tmp_path: Path) -> Path:
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"targets: [{T}]\ndtypes: [fp16, bf16]\nverify:\n  level: integrity\n")
    return plan


@pytest.mark.parametrize("name", ["report.json", "report.md"])
def test_refresh_refuses_a_symlink_in_its_report_dir_before_building(
        small_cache, cache, tmp_path, canary, name):
    reports = tmp_path / "report"
    _link(canary, reports / name)
    stats = (cache / T / "stats.jsonl").read_bytes()
    r = CliRunner().invoke(main, ["refresh", "--plan", str(_plan(tmp_path)), "--report-dir",
                                  str(reports), "--geometries", str(small_cache["geometries"]),
                                  "--cache-dir", str(cache)])
    assert (r.exit_code, r.stdout, r.stderr.splitlines()) == (
        2, "", [f"error: --report-dir {reports}: {name}: {LINK}"]), r.output
    assert canary.unchanged() and sorted(os.listdir(reports)) == [name]
    assert (cache / T / "stats.jsonl").read_bytes() == stats  # no build ran


def test_refresh_replaces_a_hard_linked_report_without_writing_through_it(
        small_cache, cache, tmp_path, canary):
    reports = tmp_path / "report"
    reports.mkdir()
    os.link(canary.dir / "secret.txt", reports / "report.md")
    canary.seal()
    r = CliRunner().invoke(main, ["refresh", "--plan", str(_plan(tmp_path)), "--report-dir",
                                  str(reports), "--geometries", str(small_cache["geometries"]),
                                  "--cache-dir", str(cache)])
    assert r.exit_code == 0, r.output
    assert canary.unchanged()
    md = (reports / "report.md").read_text()
    assert md.startswith("# wgradcache nightly refresh: ok\n") and r.stdout.startswith(md)
