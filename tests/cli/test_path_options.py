"""Every file or directory option answers a path of the wrong kind with one line and exit 2
(click's usage block before): a directory for a file option (--plan, --junit), a file for a
directory option (--cache-dir, --out, --report-dir; merge's --into says so itself), through
a symlink too, with a name that holds a newline printed escaped; nothing is created."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tests.hostile.conftest import tree
from wgradcache.cli import main

LABEL = "gfx1250-fp16-t32x32x32-w1x1-v8x8-sync-default-none"

# (argv with {p} for the path, the option, what it wants)
OPTIONS = [
    (["refresh", "--plan", "{p}"], "--plan", "file"),
    (["verify", "--from-cache", "--junit", "{p}"], "--junit", "file"),
    (["ls", "--cache-dir", "{p}"], "--cache-dir", "dir"),
    (["build", "--target", "gfx1250", "--cache-dir", "{p}"], "--cache-dir", "dir"),
    (["compile", LABEL, "--out", "{p}"], "--out", "dir"),
    (["refresh", "--plan", "jobs/nightly.yaml", "--report-dir", "{p}"], "--report-dir", "dir"),
]


def _wrong(tmp_path, kind: str, name: str = "x", link: bool = False):
    """A path of the other kind than ``kind``, optionally a symlink to it."""
    target = tmp_path / f"real-{name}"
    if kind == "file":
        target.mkdir()
    else:
        target.write_text("not a directory\n")
    if not link:
        return target
    path = tmp_path / name
    path.symlink_to(target)
    return path


@pytest.mark.parametrize(("argv", "option", "kind"), OPTIONS,
                         ids=[f"{a[0]}{o}" for a, o, _ in OPTIONS])
@pytest.mark.parametrize("link", [False, True], ids=["plain", "symlink"])
def test_a_path_of_the_wrong_kind_is_one_line(tmp_path, monkeypatch, argv, option, kind, link):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "nightly.yaml").write_text("targets: [gfx1250]\n")
    path = _wrong(tmp_path, kind, link=link)
    before = tree(tmp_path)
    r = CliRunner().invoke(main, [a.format(p=path) for a in argv])
    what = "a directory, not a file" if kind == "file" else "a file, not a directory"
    assert (r.exit_code, r.stdout, r.stderr.splitlines()) == (
        2, "", [f"error: {option} {path}: {what}"]), r.output
    assert tree(tmp_path) == before


def test_a_name_with_a_newline_is_printed_escaped(tmp_path):
    path = _wrong(tmp_path, "file", name="a\nb")
    r = CliRunner().invoke(main, ["refresh", "--plan", str(path)])
    assert r.exit_code == 2
    assert r.stderr.splitlines() == [
        f"error: --plan {tmp_path}/real-a\\nb: a directory, not a file"]
