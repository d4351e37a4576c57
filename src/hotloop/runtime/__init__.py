"""Running compiled artifacts: the fixed-shape `Engine`, its policy wrapper, the per-operator profiler."""
