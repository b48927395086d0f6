"""Running stored code objects on a real device: ``hip`` (hip-python) and ``launch`` (one wgrad
launch judged against float64, the device twin of ``pipeline.emulate``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LaunchDims:
    """The shape of one launch, as both sessions take it (``HipSession.launch``,
    ``CudaSession.launch``): the grid, the threads of a 1-D block and the dynamic shared
    (LDS) bytes, as a launch configuration groups them."""

    grid: tuple[int, int, int]
    block: int
    shared: int = 0
