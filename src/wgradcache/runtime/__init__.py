"""Running stored code objects on a real device: ``hip`` (hip-python) and ``launch`` (one wgrad
launch judged against float64, the device twin of ``pipeline.emulate``)."""
