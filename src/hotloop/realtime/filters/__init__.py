"""Streaming filters for actions and estimates, numpy only (no torch: this runs on the robot side).

One concept per module: `lowpass` (first-order and Butterworth), `window` (moving, weighted and
Savitzky–Golay windows), `kalman` (constant-velocity / constant-acceleration trackers), `so3`
(quaternion slerp, averaging and smoothing on the rotation group). Every filter is fed one sample at a
time (`update`), can be `reset`, and states its lag (`delay_samples`; multiply by the sample period for
seconds), which each class's docstring derives.
"""

from hotloop.realtime.filters.protocol import StreamFilter, filter_signal

__all__ = ["StreamFilter", "filter_signal"]
