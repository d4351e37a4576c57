"""hotloop: make robot policies meet their deadline.

`import hotloop` stays light: heavy parts (torch, MuJoCo, backends) load when used.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
