import pytest

from hotloop.errors import ConfigError, UnknownNameError
from hotloop.registry import Registry
from hotloop.targets import default_targets


def test_duplicates_rejected_and_unknown_names_suggest():
    reg: Registry[int] = Registry("widget")
    reg.register("alpha", 1)
    with pytest.raises(ConfigError, match="already registered"):
        reg.register("alpha", 2)
    with pytest.raises(UnknownNameError) as info:
        reg.get("alpah")
    assert "Did you mean 'alpha'?" in str(info.value)
    assert "Known: alpha" in str(info.value)


def test_builtin_targets():
    names = default_targets().names()
    for name in ("toy:mlp", "pi0:full", "pi0:tiny", "pi05:full", "pi05:small", "pi05:tiny", "demo:conveyor"):
        assert name in names
    # Each call builds a fresh registry: registering on one copy does not leak into the next.
    reg = default_targets()
    reg.register("mine:x", reg.get("toy:mlp"))
    assert "mine:x" not in default_targets()
