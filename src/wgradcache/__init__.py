"""wgradcache: ahead-of-time cache of AMD GPU wgrad code objects."""

__version__ = "0.1.0"
