"""hotloop: make robot policies meet their deadline.

`import hotloop` stays light: heavy parts (torch, MuJoCo, backends) load when used.
"""

__version__ = "0.1.0"

__all__ = ["Engine", "__version__"]


def __getattr__(name: str) -> object:
    # `hotloop.Engine` loads the runtime (torch, backends) only when first used.
    if name == "Engine":
        from hotloop.runtime.engine import Engine

        return Engine
    raise AttributeError(f"module 'hotloop' has no attribute {name!r}")
