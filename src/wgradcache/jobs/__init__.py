"""Jobs: geometries.yaml, the walk and its closed-form count."""

from wgradcache.jobs.geometries import GeometryFileError, JobData, default_jobdata, load
from wgradcache.jobs.walk import (
           Selection,
           SelectionError,
           count,
           count_table,
           resolve_selection,
           walk,
)

__all__ = ["GeometryFileError", "JobData", "default_jobdata", "load", "Selection",
           "SelectionError", "count", "count_table", "resolve_selection", "walk"]
