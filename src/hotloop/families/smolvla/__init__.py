"""The SmolVLA family (LeRobot's `smolvla`): sub-engines, sampler, RTC, policy, targets and checkpoint folders.

The model itself is `hotloop.models.smolvla` (LeRobot's numerics, bit for bit); this package only cuts it into
fixed-shape sub-engines (vision -> prefix -> denoise) and drives it as a robot policy.
"""
