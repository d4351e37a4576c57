"""Small file helpers: every result file is written whole or not at all, and checked before the work.

`check_output_file` / `check_output_dir` run at the start of a command, so a path that cannot be
written (a read-only or missing-permission directory, a directory given as a file, a path under /proc)
is an `error:` line before minutes of work, not a traceback after it.
"""

from __future__ import annotations

import json
import math
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from hotloop.errors import ConfigError


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, follow_symlinks: bool = True) -> Path:
    """Write to a temporary file beside `path`, then rename: a crash never leaves a partial file.

    The file gets the mode a plain `open(path, "w")` would give (0666 minus the umask), or keeps the mode
    of the file it replaces. A symlink at `path` stays a link: the temporary file is written beside the
    link's target and renamed onto it, so the write is atomic and goes where the link points.
    `follow_symlinks=False` (a file hotloop owns, such as a cache): a link at `path` is replaced by the
    file, and what it pointed to is left alone.
    """
    target = Path(path)
    real = Path(os.path.realpath(target)) if follow_symlinks and target.is_symlink() else target
    real.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = stat.S_IMODE(real.stat(follow_symlinks=follow_symlinks).st_mode)
        if stat.S_ISLNK(real.lstat().st_mode):
            mode = 0o666 & ~_umask()  # a link's own mode means nothing
    except OSError:
        mode = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)  # mkstemp makes 0600 files: readers expect the usual mode
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, real)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def atomic_write_figure(path: str | os.PathLike[str], fig: Any, *, dpi: int = 100) -> Path:
    """Render a matplotlib figure as PNG and write it with `atomic_write_bytes`; the figure is closed."""
    import io

    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    plt.close(fig)
    return atomic_write_bytes(path, buffer.getvalue())


def _umask() -> int:
    # Reading the umask means setting it; /proc gives it without the (thread-unsafe) round trip.
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def save_tensors(
    tensors: dict[str, Any], path: str | os.PathLike[str], metadata: dict[str, str] | None = None
) -> Path:
    """`safetensors.torch.save_file` with the mode a plain `open(path, "w")` would give (0666 minus the
    umask): safetensors itself makes its files 0600, which other users of a shared checkpoint cannot read."""
    from safetensors.torch import save_file

    save_file(tensors, str(path), metadata=metadata)
    os.chmod(path, 0o666 & ~_umask())
    return Path(path)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any, *, follow_symlinks: bool = True) -> Path:
    """Write `obj` as standard JSON: NaN and infinities (which JSON cannot hold) are written as null."""
    try:
        text = json.dumps(obj, indent=2, allow_nan=False, default=_jsonable)
    except ValueError:  # a non-finite float somewhere: keep the file valid (and the work) rather than fail
        text = json.dumps(_finite(obj), indent=2, allow_nan=False, default=_jsonable)
    return atomic_write_bytes(path, (text + "\n").encode("utf-8"), follow_symlinks=follow_symlinks)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if hasattr(obj, "tolist") and not isinstance(obj, (str, bytes)):
        return _finite(obj.tolist())
    return obj


def _jsonable(obj: Any, into: str = "JSON") -> Any:
    # numpy scalars and arrays, dataclass-free fallbacks: keep result files plain JSON. `into`: what the
    # TypeError says the value could not be written to.
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot write {type(obj).__name__} to {into}")


def read_bytes_bounded(path: str | os.PathLike[str], flag: str, limit: int) -> bytes:
    """The bytes of a regular file of at most `limit` bytes, or one line naming `flag` and the bound
    (a device such as /dev/zero, a folder, a file past the bound: never read until memory runs out)."""
    target = Path(path)
    who = f"{flag} {path}" if flag else str(path)
    try:
        info = target.stat()
    except FileNotFoundError:
        raise ConfigError(f"{who} does not exist") from None
    except OSError as e:
        raise ConfigError(f"{who}: cannot read it ({e.strerror or e})") from None
    if stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"{who} is a folder; give a file")
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{who} is not a regular file (a device or a pipe); give a file")
    if info.st_size > limit:
        raise ConfigError(
            f"{who} is {info.st_size / 2**20:.1f} MiB, more than the {limit / 2**20:g} MiB such a "
            "file can hold; give the file hotloop wrote"
        )
    try:
        with target.open("rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise ConfigError(f"{who}: cannot read it ({e.strerror or e})") from None
    if len(data) > limit:  # grew while read
        raise ConfigError(f"{who} is more than {limit / 2**20:g} MiB; give the file hotloop wrote")
    return data


def read_text_bounded(path: str | os.PathLike[str], flag: str, limit: int) -> str:
    """`read_bytes_bounded` as UTF-8 text (other bytes: one line naming `flag`; empty: the path alone)."""
    who = f"{flag} {path}" if flag else str(path)
    try:
        return read_bytes_bounded(path, flag, limit).decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{who} is not UTF-8 text (byte {e.start}); give the file hotloop wrote") from None


MAX_JSON_FILE = 256 << 20  # a result with a million episodes' records; anything larger is not hotloop's


def read_json_file(path: str | os.PathLike[str], flag: str = "", limit: int = MAX_JSON_FILE) -> Any:
    """The JSON value in `path`, or one line naming `flag` and the file: missing, not a regular file, past
    `limit` bytes, not UTF-8, not JSON, or nested too deep to read (a traceback otherwise)."""
    who = f"{flag} {path}" if flag else str(path)
    text = read_text_bounded(path, flag, limit)
    try:
        return json.loads(text)
    except RecursionError:
        raise ConfigError(f"{who} is nested too deep to be a hotloop file") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{who} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None


def _nearest_existing(path: Path) -> Path:
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def _probe_writable(directory: Path, flag: str, path: Path) -> None:
    """Create and delete a file in `directory`: the only test that holds for root, ACLs and /proc."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".hotloop-check.", dir=directory)
    except OSError as e:
        raise ConfigError(
            f"{flag} {path}: cannot write in {directory} ({e.strerror or e}); pick a writable location"
        ) from None
    os.close(fd)
    os.unlink(tmp)


def check_output_file(path: str | os.PathLike[str] | None, flag: str) -> None:
    """Fail now, naming `flag`, if `path` could not be written as a file later."""
    if path is None:
        return
    target = Path(path)
    if target.is_symlink():
        target = Path(os.path.realpath(target))
    if target.is_dir():
        raise ConfigError(f"{flag} {path} is a directory; give a file path such as {Path(path) / 'out'}")
    if target.exists() and not target.is_file():
        raise ConfigError(f"{flag} {path} is not a regular file; give a file path")
    base = _nearest_existing(target.parent)
    if not base.is_dir():
        raise ConfigError(f"{flag} {path}: {base} is a file, not a directory; pick another path")
    _probe_writable(base, flag, Path(path))


def check_output_dir(
    path: str | os.PathLike[str], flag: str, *, must_be_empty: bool = False, allow: tuple[str, ...] = ()
) -> None:
    """Fail now, naming `flag`, if `path` cannot be made or written as a directory.

    `must_be_empty`: an existing directory must be empty apart from the names in `allow` (a command that
    fills a directory of its own, like a dataset, must not mix its files into someone else's).
    """
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise ConfigError(f"{flag} {path} is a file, not a directory; give a new directory")
    if target.is_dir() and must_be_empty:
        others = sorted(p.name for p in target.iterdir() if p.name not in allow)
        if others:
            shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
            raise ConfigError(f"{flag} {path} is not empty (holds {shown}); give a new or empty directory")
    base = _nearest_existing(target)
    if not base.is_dir():
        raise ConfigError(f"{flag} {path}: {base} is a file, not a directory; pick another path")
    _probe_writable(base, flag, target)


PLOT_SUFFIXES = (".png", ".svg", ".pdf", ".jpg", ".jpeg")


def check_plot_file(path: str | os.PathLike[str] | None, flag: str, others: dict[str, Any]) -> None:
    """`check_output_file` for a plot: a suffix the plotting library writes, and not the same file as
    another output of the command (`others`: flag -> path), which the plot would overwrite."""
    if path is None:
        return
    target = Path(path)
    if target.suffix.lower() not in PLOT_SUFFIXES:
        raise ConfigError(
            f"{flag} {path}: a plot is written as {', '.join(PLOT_SUFFIXES)}; e.g. {target.with_suffix('.png')}"
        )
    for other_flag, other in others.items():
        if other is not None and Path(os.path.realpath(other)) == Path(os.path.realpath(target)):
            raise ConfigError(f"{flag} {path} is the same file as {other_flag}; give the plot its own file")
    check_output_file(path, flag)


def cache_root() -> Path:
    """hotloop's cache folder: `$HOTLOOP_CACHE_DIR`, else `$XDG_CACHE_HOME/hotloop`, else ~/.cache/hotloop."""
    own = os.environ.get("HOTLOOP_CACHE_DIR")
    if own:
        return Path(own)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = (
        Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    )  # the spec: relative = unset
    return base / "hotloop"
