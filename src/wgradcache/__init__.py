"""wgradcache: ahead-of-time cache of GPU wgrad code objects.

Loading the package registers the vendors' backends (``model/backends.py``), then those of
the modules ``WGRADCACHE_BACKENDS`` names (comma-separated): a stage reaches a backend
through the registry, so the objects must exist before the first stage runs.
"""

import importlib as _importlib
import os as _os

from wgradcache.backend import amdgpu as _amdgpu  # noqa: F401
from wgradcache.backend import nvptx as _nvptx  # noqa: F401

__version__ = "0.1.0"

for _name in filter(None, (n.strip() for n in
                           _os.environ.get("WGRADCACHE_BACKENDS", "").split(","))):
    _importlib.import_module(_name)
