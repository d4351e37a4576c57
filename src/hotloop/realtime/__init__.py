"""The real-time execution layer: how action chunks reach the motors on time, in the simulator and on a robot.

- `strategies`: when to infer and how a new chunk replaces the old (sync, chunk, async, rtc), and blending.
- `clock`: ticks of the simulator's physics or of the monotonic wall clock, behind one `Clock`.
- `scheduler`: the chunk scheduler both the closed-loop evaluator and a robot runner drive.
- `watchdog`: inference deadlines, misses, fallbacks and their events and counters.
- `runner`: the wall-clock loop (monotonic deadlines, overrun count) and inference engines.
- `rtc`: real-time chunking, guided inpainting of the next chunk (torch imported only when sampling).

Nothing here imports torch at module level: a robot-side client can use the scheduler without it.
"""
