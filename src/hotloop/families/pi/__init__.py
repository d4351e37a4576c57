"""The pi0 / pi0.5 family: sampler, sub-engines, recipes, policy wrapper and checkpoint reader."""
