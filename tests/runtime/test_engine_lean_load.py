"""A plan whose every sub-engine runs from its own files (OpenVINO here) is written lean: no source weights,
the pipeline's tables and the token embedding in their own files. `Engine.load` builds it without ever
constructing the torch model, maps the token embedding instead of reading it, reproduces the reference's
actions, and reports its load time (bench JSON, /healthz). Bad input (an edited file, another artifact
format, a memory cap below the plan's weights) is one line and exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

pytest.importorskip("openvino")

# Two flow-matching steps: what is checked does not depend on the count, and OpenVINO unrolls the loop
# engine once per step.
STEPS = 2
runner = CliRunner()


@pytest.fixture(scope="module")
def ov_art(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hotloop.cli import app

    out = tmp_path_factory.mktemp("lean") / "art"
    args = ["compile", "pi05:tiny", "-o", str(out), "--budget-ms", "1e5", "--backends", "openvino"]
    args += ["--precisions", "fp32", "--variants", "plain", "--iters", "1", "--warmup", "0", "--threads", "1"]
    res = runner.invoke(app, [*args, "--quiet", "--steps", str(STEPS)])
    assert res.exit_code == 0, res.output
    return out


def _bench(*args: str) -> Any:
    from hotloop.cli import app

    return runner.invoke(app, ["bench", *args, "--iters", "2", "--warmup", "0", "--threads", "1", "--quiet"])


def test_the_artifact_holds_only_what_runs(ov_art: Path) -> None:
    manifest = json.loads((ov_art / "manifest.json").read_text())
    assert manifest["layout"] == "lean" and manifest["weights"] is None
    assert not (ov_art / "weights.safetensors").exists()
    assert manifest["source_weights_sha256"]  # the source is still named
    on_disk = {
        str(p.relative_to(ov_art)) for p in ov_art.rglob("*") if p.is_file() and p.name != "manifest.json"
    }
    assert set(manifest["files"]) == on_disk  # every file is hashed
    assert {"tables.safetensors", "token_embedding.safetensors"} <= on_disk
    assert manifest["lookups"] == {"token_embedding": "token_embedding.safetensors"}
    graphs = sum((ov_art / f).stat().st_size for e in manifest["sub_engines"] for f in e["files"])
    assert manifest["memory"]["weights_mb"] == pytest.approx(graphs / 2**20, abs=0.1)


def test_lean_load_never_builds_the_torch_model_and_keeps_the_actions(
    ov_art: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    import hotloop
    from hotloop.compile.sources import policy_source
    from hotloop.compile.validate import compare_actions
    from hotloop.families.pi.sampling import sample_actions
    from hotloop.models.pi0 import PiModel
    from hotloop.runtime.policy import engine_policy
    from hotloop.targets import TargetOptions

    src = policy_source("pi05:tiny", TargetOptions(num_steps=STEPS))
    want = sample_actions(src.model, src.obs, noise=src.noise)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("Engine.load of a lean artifact built the torch model")

    monkeypatch.setattr(PiModel, "__init__", refuse)
    engine = hotloop.Engine.load(ov_art, threads=1)
    assert engine.model is None and {r.backend for r in engine.runners.values()} == {"openvino"}
    assert engine.load_s is not None and engine.load_s > 0
    table = engine.pipeline.constants["token_embedding"]
    assert table.dtype == torch.float32 and table.shape[0] == engine.cfg.vocab_size  # fp32 plan: fp32 rows
    assert not isinstance(table, torch.Tensor)  # read by rows from its file, never held whole
    assert compare_actions(want, engine.infer(src.obs, src.noise)).cosine >= 0.99999
    policy = engine_policy(engine)
    images = src.obs.images[0].permute(0, 2, 3, 1).numpy() * 0.5 + 0.5  # (views, H, W, 3) in [0, 1]
    actions = policy.infer({"images": images, "state": src.obs.state[0, :4].numpy()})["actions"]
    assert actions.shape[0] >= 1 and bool((abs(actions) < 1e6).all())


def test_bench_reports_the_load_time_and_the_cold_load(
    ov_art: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hotloop.runtime import page_cache

    # The artifact's own pages only: as root, drop_caches would empty the whole machine's page cache.
    monkeypatch.setattr(page_cache, "METHODS", ("fadvise",))
    out = tmp_path / "b.json"
    res = _bench(str(ov_art), "--cold-load", "--json", str(out))
    assert res.exit_code == 0, res.output
    info = json.loads(out.read_text())["info"]
    assert info["load_s"] > 0 and info["layout"] == "lean"
    assert info["load_cache"].startswith("cold: the artifact's") and "posix_fadvise" in info["load_cache"]
    assert "loaded in" in res.output
    res = _bench(str(ov_art), "--json", str(out))
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["info"]["load_cache"].startswith("as found")
    res = _bench("toy:mlp", "--cold-load")
    assert res.exit_code == 2 and "--cold-load" in res.output and "not an artifact" in res.output


def test_healthz_reports_the_load_time_once_ready(ov_art: Path) -> None:
    import urllib.request

    from hotloop.serve.policies import load_served_policy
    from hotloop.serve.server import PolicyServer, ServeConfig, ServerThread
    from hotloop.targets import TargetOptions

    served = load_served_policy(str(ov_art), TargetOptions())
    assert served.load_s is not None and served.load_s >= served.policy.engine.load_s
    with (
        ServerThread(PolicyServer(served, ServeConfig(port=0))) as server,
        urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=10) as reply,
    ):
        status, body = reply.status, reply.read().decode()
    assert status == 200 and body == f"OK load_s={served.load_s:.3f}\n"


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_an_edited_token_table_is_one_line_exit_2(ov_art: Path, tmp_path: Path) -> None:
    art = _copy(ov_art, tmp_path / "edited")
    table = art / "token_embedding.safetensors"
    data = bytearray(table.read_bytes())
    data[-1] ^= 0xFF
    table.write_bytes(bytes(data))
    res = _bench(str(art))
    assert res.exit_code == 2, res.output
    assert "token_embedding.safetensors: sha256 does not match" in res.output
    assert len(res.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "version,message",
    [(1, "artifact format 1 is older than this hotloop reads"), (3, "artifact format 3 is newer")],
)
def test_another_artifact_format_is_one_line_exit_2(
    ov_art: Path, tmp_path: Path, version: int, message: str
) -> None:
    art = _copy(ov_art, tmp_path / f"v{version}")
    manifest = json.loads((art / "manifest.json").read_text())
    manifest["schema_version"] = version
    (art / "manifest.json").write_text(json.dumps(manifest))
    res = _bench(str(art))
    assert res.exit_code == 2, res.output
    assert message in res.output and ("recompile" in res.output or "upgrade" in res.output)
    assert len(res.output.strip().splitlines()) == 1


def test_a_lean_artifact_from_another_machine_is_not_replanned_without_its_source(
    ov_art: Path, tmp_path: Path
) -> None:
    import hotloop
    from hotloop.errors import CheckpointError

    art = _copy(ov_art, tmp_path / "other-machine")
    manifest = json.loads((art / "manifest.json").read_text())
    manifest["machine"]["class"] = {"arch": "riscv64", "isa": []}
    (art / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="lean artifact holds only what runs.*pi05:tiny"):
        hotloop.Engine.load(art, replan=True)
    assert not (tmp_path / "other-machine-replanned").exists()


def test_a_memory_cap_below_the_plans_weights_is_refused_before_loading(
    ov_art: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hotloop
    from hotloop.compile.backends.openvino import OpenVinoBackend
    from hotloop.errors import MemoryCapError

    manifest = json.loads((ov_art / "manifest.json").read_text())
    assert manifest["memory"]["weights_mb"] > 0
    # pi05:tiny's graphs hold under a MiB, below the smallest cap the flag takes (1 MiB): the same plan
    # recorded as needing 64 MiB stands in for a larger one (the floor is the manifest's figure).
    big = tmp_path / "art"
    shutil.copytree(ov_art, big)
    manifest["memory"]["weights_mb"] = floor = 64.0
    (big / "manifest.json").write_text(json.dumps(manifest))
    cap = floor * 0.9
    ov_art = big

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a graph was loaded under a cap the plan cannot meet")

    with monkeypatch.context() as patched:
        patched.setattr(OpenVinoBackend, "load", refuse)
        with pytest.raises(MemoryCapError, match=f"weights alone take {floor:.0f} MiB.*--memory-cap-mb"):
            hotloop.Engine.load(ov_art, memory_cap_mb=cap)
    res = _bench(str(ov_art), "--memory-cap-mb", f"{cap:g}")
    assert res.exit_code == 2 and "--memory-cap-mb" in res.output, res.output


def test_an_artifact_with_a_torch_runner_keeps_its_weights(tmp_path: Path, compile_tiny) -> None:
    import hotloop

    out = tmp_path / "art"
    res = compile_tiny(out, "eager", "fp32", "--quiet")
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest.get("layout", "weights") == "weights" and manifest["weights"] in manifest["files"]
    engine = hotloop.Engine.load(out, threads=1)
    assert not any(p.is_meta for p in engine.model.parameters())
    assert engine.describe()["torch_threads_in_call"] is None  # torch runs a sub-engine: its threads stay


def test_a_second_load_imports_the_compiled_graphs_from_hotloops_cache(ov_art: Path) -> None:
    """OpenVINO's compiled blobs go to hotloop's cache folder (never the artifact), keyed by the graph
    files' hashes, precision and settings: the second load imports them and gives the same actions; a
    thread count the blobs were not compiled for compiles (and caches) its own."""
    import os

    import torch

    from hotloop.runtime.engine import Engine

    first = Engine.load(ov_art, threads=1)
    assert set(first.describe()["compiled_blobs"].values()) == {"compiled, cached"}
    # compiled once, in the probe's child (a fresh interpreter); this process imported the child's blob
    assert all(r.loaded_from_cache for r in first.runners.values())
    obs = first.example_observation()
    noise = torch.randn(1, 10, 32, generator=torch.Generator().manual_seed(1))  # pi05:tiny's chunk
    want = first.infer(obs, noise).clone()
    blobs = Path(os.environ["HOTLOOP_CACHE_DIR"]) / "openvino-blobs"
    assert len([p for p in blobs.iterdir() if p.is_dir()]) == len(first.runners)
    assert not any(p.suffix == ".blob" for p in ov_art.rglob("*"))  # nothing written into the artifact
    second = Engine.load(ov_art, threads=1)
    assert set(second.describe()["compiled_blobs"].values()) == {"imported"}
    assert torch.equal(second.infer(obs, noise), want)
    other = Engine.load(ov_art, threads=2)
    assert set(other.describe()["compiled_blobs"].values()) == {"compiled, cached"}


def test_torch_glues_an_all_openvino_plan_on_one_thread_and_the_callers_count_is_kept(ov_art: Path) -> None:
    """Every sub-engine runs on OpenVINO's own pool: during a call torch (the glue between them) runs one
    thread, so its spinning OpenMP workers leave the cores to OpenVINO; the caller's count is restored."""
    import torch

    from hotloop.runtime.engine import Engine

    engine = Engine.load(ov_art, threads=2)
    assert engine.describe()["torch_threads_in_call"] == 1
    seen: list[int] = []
    runner = next(iter(engine.runners.values()))
    original = runner.__call__

    class Spy:
        def __getattr__(self, name: str) -> object:
            return getattr(runner, name)

        def __call__(self, *args: object) -> object:
            seen.append(torch.get_num_threads())
            return original(*args)

    for pipeline in engine.pipelines.values() or [engine.pipeline]:
        for name, r in list(pipeline.runners.items()):
            if r is runner:
                pipeline.runners[name] = Spy()
    torch.set_num_threads(2)
    engine.infer(engine.example_observation())
    assert seen and set(seen) == {1}
    assert torch.get_num_threads() == 2


def test_the_blob_cache_keeps_to_its_bound_by_removing_the_least_recently_used(
    ov_art: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every artifact and thread count gets blob folders of its own: a load that finds the cache over
    `$HOTLOOP_BLOB_CACHE_GB` removes the least recently used folders, never its own, and still gives the
    same actions (a removed blob costs a compile, nothing else)."""
    import os

    import torch

    from hotloop.runtime.engine import Engine

    blobs = Path(os.environ["HOTLOOP_CACHE_DIR"]) / "openvino-blobs"
    first = Engine.load(ov_art, threads=1)
    obs = first.example_observation()
    noise = torch.randn(1, 10, 32, generator=torch.Generator().manual_seed(1))
    want = first.infer(obs, noise).clone()
    by_one = {p for p in blobs.iterdir() if p.is_dir()}
    assert len(by_one) == len(first.runners) and all(any(p.iterdir()) for p in by_one)
    monkeypatch.setenv("HOTLOOP_BLOB_CACHE_GB", "1e-9")  # a byte: only the folder in use may stay
    other = Engine.load(ov_art, threads=2)
    assert torch.equal(other.infer(obs, noise), want)
    left = {p for p in blobs.iterdir() if p.is_dir()}
    assert not left & by_one  # the threads=1 folders, least recently used, are gone
    assert len(left) == 1  # the last folder the load used; its siblings were removed as it went


def test_a_bad_blob_cache_bound_is_one_line_naming_the_variable(
    ov_art: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOTLOOP_BLOB_CACHE_GB", "ten")
    res = _bench(str(ov_art))
    assert res.exit_code == 2, res.output
    assert "HOTLOOP_BLOB_CACHE_GB='ten'" in res.output and "above 0" in res.output


def test_edited_graph_weights_are_caught_after_a_load_remembered_their_digests(
    ov_art: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A warm load reuses a file's sha256 while its inode, size and times are unchanged
    (`compile.verified_files`); any write moves its ctime, so edited weights of the same size are still
    one line, exit 2, and their blob is never imported."""
    import time

    from hotloop.compile import verified_files

    art = _copy(ov_art, tmp_path / "remembered")
    time.sleep(0.05)  # past the timestamp tick of the copy
    monkeypatch.setattr(verified_files, "RACY_S", 0.0)  # remember files written a moment ago
    hashed: list[Path] = []
    real = verified_files.sha256_file
    monkeypatch.setattr(verified_files, "sha256_file", lambda p, *a: hashed.append(p) or real(p, *a))
    assert _bench(str(art)).exit_code == 0
    files = len(hashed)
    assert files >= 4 and _bench(str(art)).exit_code == 0 and len(hashed) == files  # none hashed again
    graph = next(p for p in art.rglob("model.bin"))
    data = bytearray(graph.read_bytes())
    data[len(data) // 2] ^= 0xFF
    time.sleep(0.05)
    graph.write_bytes(bytes(data))
    res = _bench(str(art))
    assert res.exit_code == 2, res.output
    assert f"{graph}: sha256 does not match" in res.output and len(res.output.strip().splitlines()) == 1


def test_a_file_written_within_the_racy_window_is_not_remembered(tmp_path: Path) -> None:
    import os

    from hotloop.compile.artifact import sha256_file
    from hotloop.compile.verified_files import FOLDER, file_sha256

    f = tmp_path / "fresh.bin"
    f.write_bytes(b"x" * 4096)
    assert file_sha256(f) == sha256_file(f)
    assert not (Path(os.environ["HOTLOOP_CACHE_DIR"]) / FOLDER).exists()


def test_the_graphs_mapped_files_are_not_left_resident_after_load(
    ov_art: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenVINO repacks the weights into its own memory and keeps its mapping of the blob (or IR) open: a
    second copy of the model in the resident set (2.5 of 5.8 GB at pi0.5's full size). The load releases
    those pages; the actions are unchanged and almost all of them stay out across calls."""
    import os

    import torch

    import hotloop.compile.backends.openvino as ov_backend
    from hotloop.runtime.engine import Engine

    released: list[int] = []

    def counted(folders: list[Path]) -> int:
        released.append(ov_backend.release_mapped_files.__wrapped__(folders))  # type: ignore[attr-defined]
        return released[-1]

    reference = Engine.load(ov_art, threads=1)
    obs = reference.example_observation()
    noise = torch.randn(1, 10, 32, generator=torch.Generator().manual_seed(2))
    want = reference.infer(obs, noise).clone()
    counted.__wrapped__ = ov_backend.release_mapped_files  # type: ignore[attr-defined]
    monkeypatch.setattr(ov_backend, "release_mapped_files", counted)
    engine = Engine.load(ov_art, threads=1)
    assert len(released) == len(engine.runners) and sum(released) > 0
    blobs = Path(os.environ["HOTLOOP_CACHE_DIR"]) / "openvino-blobs"
    for _ in range(2):
        assert torch.equal(engine.infer(obs, noise), want)
        # A few small constants are read in place and fault back in (pi05:tiny: 84 of 1,840 kB).
        back = _resident_kb_under(blobs) + _resident_kb_under(ov_art)
        assert back * 1024 < 0.1 * sum(released)


def _resident_kb_under(folder: Path) -> int:
    """Resident kB of this process's file mappings under `folder` (/proc/self/smaps)."""
    root, total, inside = str(folder.resolve()) + "/", 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(None, 5)
            if len(head) >= 5 and "-" in head[0] and not head[0].endswith(":"):
                inside = len(head) > 5 and head[5].strip().startswith(root)
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1])
    return total
