"""Closed-loop evaluation on the simulated world: the evaluator (simulated time advancing while the policy
thinks), eval runs and their worker pool, metrics, latency models, and the adapter from a task to a policy."""
