"""Real-time execution: how actions reach the motors on time, in the simulator and on a robot alike.

- `strategies`: when to infer and how a new chunk replaces the old (sync, chunk, async, rtc).
- `blending`: latest-only, weighted average and ACT temporal ensembling of overlapping chunks.
- `clock`: ticks of the simulator's physics or of the monotonic wall clock, behind one `Clock`.
- `scheduler`: the chunk scheduler both the closed-loop evaluator and a robot runner drive.
- `watchdog`: inference deadlines, misses, fallbacks and their events and counters.
- `runner`: the one control loop, inference engines, and the wall-clock runner (overruns counted).
- `rtc`: real-time chunking, guided inpainting of the next chunk (torch imported only when sampling).
- `filters`, `interpolate`, `budget`: action filters and SO(3) smoothing, control-rate interpolation,
  layered pipeline budgets.

Nothing here imports torch at module level: a robot-side client can use the scheduler without it.
"""
