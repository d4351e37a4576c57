"""Compile a policy against a latency budget and a precision tolerance into a verified artifact.

artifact.py (manifest + files + hashes), backends/ (one protocol, one module per backend), validate.py
(numerical agreement with the fp32 reference), planner.py (candidates checked, measured, chosen),
cpu_features.py (what a plan needs from the CPU), commands.py (`hotloop compile`, `hotloop profile`).
"""
