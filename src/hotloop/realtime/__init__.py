"""Real-time execution: how actions reach the motors on time (chunk scheduling, watchdog, filters,
control-rate interpolation, layered budgets). Used by the simulator's closed loop and by a robot alike."""
