"""Errors that reach a user: each message names the offending value and how to fix it."""


class HotloopError(Exception):
    """Base class for errors the CLI prints as one line (exit code 2 for bad input)."""


class ConfigError(HotloopError, ValueError):
    """A configuration value is invalid; the message names the field, the value and the fix."""


class UnknownNameError(HotloopError, KeyError):
    """A name (target, task, strategy, backend) is not registered; the message lists the known ones."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""


class CheckpointError(HotloopError):
    """A checkpoint is missing, corrupt or does not match the model it is loaded into."""


class DatasetError(ConfigError):
    """A dataset on disk is missing a file, damaged or not in the layout the reader expects."""


class MemoryCapError(HotloopError):
    """A loaded engine's resident memory went over its cap (`--memory-cap-mb`); names the artifact."""


class NonFiniteOutputError(HotloopError):
    """A policy or engine answered NaN or inf: the run stops (a broken model has no latency or success
    worth reporting); the message names the target and where the value was found (`hotloop.finite`)."""
