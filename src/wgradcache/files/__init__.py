"""Reading files nobody has checked: the bottom layer, which imports nothing of the package.

Cache records, blobs, logs, geometries files and refresh plans are all input (CI artifacts,
caches copied between machines, files users write), so each is read through
``capped.read_capped``: a regular file only, never more than a cap, and no open that
blocks. The cache (``cache/store.py``) and the YAML reader (``jobs/yamlsafe.py``) say in
their own words what they refused.
"""
