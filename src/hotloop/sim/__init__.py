"""The simulated world: MuJoCo tasks (`tasks/`), their scripted experts and views. Closed-loop evaluation
is `hotloop.closedloop`, recording `hotloop.datasets`, demo training `hotloop.train`, perception
`hotloop.perception`.

Nothing here is imported by `import hotloop`; MuJoCo and torch load only when a command uses them.
"""
