"""``files.capped.read_capped``, the one capped read behind the cache's reader and the YAML
reader: what it reads, what it refuses (with which code), and that nothing blocks."""

from __future__ import annotations

import os

import pytest

from wgradcache.files.capped import Refused, read_capped


def _refused(path, cap: int = 100, **kw) -> tuple[str, object]:
    with pytest.raises(Refused) as e:
        read_capped(path, cap, **kw)
    return e.value.code, e.value.detail


@pytest.mark.parametrize("follow", [False, True])
def test_a_regular_file_is_read_and_an_absent_one_is_none(tmp_path, follow):
    f = tmp_path / "f"
    f.write_bytes(b"x" * 100)
    assert read_capped(f, 100, follow=follow) == b"x" * 100
    assert read_capped(tmp_path / "nope", 100, follow=follow) is None
    assert read_capped(f / "under-a-file", 100, follow=follow) is None  # ENOTDIR
    assert _refused(tmp_path / "nope", follow=follow, missing_ok=False) == (
        "os_error", "No such file or directory")


def test_over_the_cap_is_refused_before_reading_or_at_cap_plus_one(tmp_path):
    f = tmp_path / "big"
    f.write_bytes(b"x" * 101)
    assert _refused(f, follow=False) == ("size", 101)  # lstat: nothing read
    assert _refused(f, follow=True) == ("size", 101)  # read stops at cap + 1
    sparse = tmp_path / "sparse"
    with open(sparse, "wb") as fh:
        fh.truncate(8 << 30)
    assert _refused(sparse, follow=False) == ("size", 8 << 30)
    assert _refused(sparse, follow=True) == ("size", 101)


def test_links_are_refused_unless_followed_and_then_judged_by_what_they_name(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"ok")
    link = tmp_path / "link"
    link.symlink_to(f)
    assert _refused(link, follow=False) == ("kind", "a symbolic link")
    assert read_capped(link, 100, follow=True) == b"ok"
    zero = tmp_path / "zero"
    zero.symlink_to("/dev/zero")
    assert _refused(zero, follow=True) == ("kind", "a character device")
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    assert _refused(loop, follow=True)[0] == "os_error"
    up = tmp_path / "d" / ".." / "f"  # a path through .. is the file it names
    (tmp_path / "d").mkdir()
    assert read_capped(up, 100, follow=False) == b"ok"


@pytest.mark.parametrize("follow", [False, True])
def test_a_fifo_or_a_directory_is_refused_without_blocking(tmp_path, follow):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer: a blocking open would hang the test
    assert _refused(fifo, follow=follow) == ("kind", "a FIFO")
    assert _refused(tmp_path, follow=follow) == ("kind", "a directory")


def test_an_empty_file_is_empty_bytes(tmp_path):
    f = tmp_path / "empty"
    f.write_bytes(b"")
    assert read_capped(f, 0, follow=False) == b""
