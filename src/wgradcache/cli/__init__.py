"""The command line: the click group (``app``) and one module per command family, each
command a parse, one library call and one render through ``console``.

Heavy imports live inside the commands so ``wgradcache count`` starts fast.
"""

from wgradcache.cli import build, cache, cover, jobs, kernel, select, tune, verify  # noqa: F401
from wgradcache.cli.app import main
from wgradcache.cli.console import RunFailed

__all__ = ["main", "RunFailed"]
