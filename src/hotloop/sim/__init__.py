"""The closed-loop proving ground: MuJoCo tasks, scripted experts, recording, training and evaluation.

Nothing here is imported by `import hotloop`; MuJoCo and torch load only when a command uses them.
"""
