"""What people see is plain, printable text, whatever a cache directory holds."""

from __future__ import annotations

from click.testing import CliRunner

from wgradcache.cli import main
from wgradcache.cli.console import printable, table


def test_printable_escapes_what_would_forge_or_drive_the_terminal():
    assert printable("gfx1250-fp16-t32x32x32") == "gfx1250-fp16-t32x32x32"
    assert printable("x\n::error::forged") == "x\\n::error::forged"
    assert printable("\x1b[31mred\x1b[0m") == "\\x1b[31mred\\x1b[0m"
    assert printable("tab\there\r") == "tab\\there\\r"
    assert printable(42) == "42"


def test_table_cells_are_text_not_markup(capsys):
    table("t [bold]x[/bold]", ("a", "b"), [("[red]label[/red]", "\x1b[2Jz\nq")])
    out = capsys.readouterr().out
    assert "[red]label[/red]" in out and "t [bold]x[/bold]" in out
    assert "\x1b" not in out and "\\x1b[2Jz\\nq" in out


def test_a_one_line_error_stays_one_line(tmp_path):
    r = CliRunner().invoke(main, ["show", "gfx1250\n::error::forged", "--cache-dir",
                                  str(tmp_path)])
    assert r.exit_code == 2
    assert r.output.count("\n") == 1 and "\\n::error::forged" in r.output


def test_an_os_error_is_one_line_naming_the_path(monkeypatch, tmp_path):
    import errno

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "c" / "x.tmp"))

    monkeypatch.setattr("wgradcache.pipeline.build.build", full)
    r = CliRunner().invoke(main, ["build", "--target", "gfx1250", "--cache-dir",
                                  str(tmp_path / "c")])
    assert r.exit_code == 1
    assert r.output == f"failed: {tmp_path}/c/x.tmp: No space left on device\n"


def test_a_junit_file_that_cannot_be_written_is_one_line(small_cache):
    r = CliRunner().invoke(main, ["verify", "--from-cache", "--level", "integrity",
                                  "--cache-dir", str(small_cache["cache"]),
                                  "--junit", "/dev/full"])
    assert r.exit_code == 1
    assert "checked " in r.output  # the report came first
    # a device is not written onto (files.written): said as for any output path
    assert r.output.splitlines()[-1] == ("failed: --junit /dev/full: cannot write: a "
                                         "character device, not a regular file")
