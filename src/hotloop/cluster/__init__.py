"""Closed-loop sweeps on a Ray cluster (`--cluster ray...`); Ray is imported only when one is asked for."""
