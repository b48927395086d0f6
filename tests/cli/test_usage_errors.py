"""Click's own usage errors are one line and exit 2, like every other bad input; --help is
untouched."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from wgradcache.cli import main


@pytest.mark.parametrize("args, line", [
    (["verify", "--level", "bogus", "--from-cache"],
     "error: Invalid value for '--level': 'bogus' is not one of 'integrity', 'structure', "
     "'reproduce', 'numerics'."),
    (["verify"], "error: Missing option '--from-cache'."),
    (["verify", "--from-cache", "--nope"], "error: No such option '--nope'."),
    (["bogus"], "error: No such command 'bogus'."),
    (["--nope"], "error: No such option '--nope'."),
])
def test_a_usage_error_is_one_line_exit_2(args, line):
    r = CliRunner().invoke(main, args)
    assert (r.exit_code, r.stderr.splitlines(), r.stdout) == (2, [line], ""), r.output


@pytest.mark.parametrize("args", [["--help"], ["verify", "--help"], ["verify", "-h"]])
def test_help_is_untouched(args):
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0 and r.stderr == ""
    assert r.stdout.startswith("Usage: ") and "Options:" in r.stdout
    assert ("--level" in r.stdout) == (args[0] == "verify")
