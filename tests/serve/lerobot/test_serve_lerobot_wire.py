"""LeRobot's async-inference wire, piece by piece: messages, chunking, the allow-list unpickler, the
pickled reply, the robot-key mapping, the instructions' checks and one client's execution bookkeeping."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import shutil
from pathlib import Path

import fake_lerobot
import numpy as np
import pytest
from standin_frames import lerobot_features

from hotloop.policy_spec import ArraySpec
from hotloop.serve.lerobot import wire
from hotloop.serve.lerobot.execution import ClientQueue, ClientSession, ExecutionConfig, Pending
from hotloop.serve.lerobot.features import Mismatch, map_features
from hotloop.serve.lerobot.instructions import ServedTarget, _lerobot_type, check_instructions
from hotloop.serve.lerobot.reply import encode_actions
from hotloop.serve.lerobot.unpickle import Refused, load_policy_config, load_timed_observation
from hotloop.serve.server import ServedPolicy
from hotloop.serve.spec import ObservationError

SPEC = {
    "images/top": ArraySpec((64, 64, 3), "uint8"),
    "images/wrist": ArraySpec((64, 64, 3), "uint8"),
    "state": ArraySpec((10,), "float32"),
    "prompt": ArraySpec((), "str", optional=True),
}


# -- messages and chunking --------------------------------------------------------------------------------
def test_messages_are_protobufs_wire_format():
    assert wire.encode_bytes_message(b"ab") == b"\x0a\x02ab"  # field 1, wire type 2, length 2
    assert wire.encode_bytes_message(b"") == b""  # an empty Actions is what Empty encodes to
    assert wire.decode_bytes_message(b"\x0a\x02ab") == b"ab"
    # Unknown fields (a varint field 7, a fixed64 field 8) are skipped, as protobuf's parsers skip them.
    assert wire.decode_bytes_message(b"\x38\x05\x41" + bytes(8) + b"\x0a\x01z") == b"z"
    chunk = wire.decode_chunk(wire.encode_chunk(wire.Chunk(wire.TRANSFER_MIDDLE, b"xyz")))
    assert chunk == wire.Chunk(wire.TRANSFER_MIDDLE, b"xyz")
    for bad in (b"\x0a\x05ab", b"\x0a", b"\x0f", b"\x00\x01"):
        with pytest.raises(wire.WireError):
            wire.decode_bytes_message(bad)


def test_chunks_reassemble_as_lerobots_receiver():
    payload = os.urandom(5 * 2**20 + 17)
    chunks = wire.split_payload(payload)
    assert [c.transfer_state for c in chunks] == [
        wire.TRANSFER_BEGIN,
        wire.TRANSFER_MIDDLE,
        wire.TRANSFER_END,
    ]
    assembler = wire.ChunkAssembler(8 * 2**20)
    assert [assembler.add(c) for c in chunks[:-1]] == [None, None]
    assert assembler.add(chunks[-1]) == payload
    # A small payload is one lone END; a BEGIN starts over whatever came before it.
    assert assembler.add(wire.Chunk(wire.TRANSFER_END, b"small")) == b"small"
    assembler.add(wire.Chunk(wire.TRANSFER_MIDDLE, b"stale"))
    assembler.add(wire.Chunk(wire.TRANSFER_BEGIN, b"a"))
    assert assembler.add(wire.Chunk(wire.TRANSFER_END, b"b")) == b"ab"
    with pytest.raises(wire.WireError, match="TRANSFER_UNKNOWN"):
        assembler.add(wire.Chunk(wire.TRANSFER_UNKNOWN, b"x"))


def test_an_oversized_payload_is_refused_when_it_passes_the_limit():
    assembler = wire.ChunkAssembler(3 * 2**20)
    chunks = wire.split_payload(bytes(10 * 2**20))
    assert assembler.add(chunks[0]) is None
    with pytest.raises(wire.TooLarge, match="max-message-mb"):
        assembler.add(chunks[1])  # 4 MiB > 3 MiB: refused here, the rest never buffered


# -- the allow-list unpickler -----------------------------------------------------------------------------
def _observation(monkeypatch, protocol: int = 4, **extra) -> bytes:
    lr = fake_lerobot.install(monkeypatch)
    obs = {"j0.pos": 0.5, "j1.pos": np.float32(1.5), "j2.pos": np.int64(3), "top": np.arange(36, dtype=np.uint8).reshape(3, 4, 3),
           "depth": np.ones((2, 2), dtype=">f8"), "task": "pick", **extra}  # fmt: skip
    return pickle.dumps(
        lr.TimedObservation(timestamp=12.5, timestep=7, observation=obs, must_go=True), protocol=protocol
    )


@pytest.mark.parametrize("protocol", [3, 4, 5])
def test_a_stock_clients_observation_loads_as_plain_data(monkeypatch, protocol):
    timed = load_timed_observation(_observation(monkeypatch, protocol))
    assert (timed.timestep, timed.timestamp, timed.must_go) == (7, 12.5, True)
    obs = timed.observation
    assert (
        obs["j0.pos"] == 0.5
        and obs["j1.pos"] == np.float32(1.5)
        and obs["j2.pos"] == 3
        and obs["task"] == "pick"
    )
    np.testing.assert_array_equal(obs["top"], np.arange(36, dtype=np.uint8).reshape(3, 4, 3))
    assert obs["depth"].dtype == np.dtype(">f8") and np.all(obs["depth"] == 1.0)


def test_numpy_1_spellings_load_too(monkeypatch):
    raw = _observation(monkeypatch, protocol=3)  # protocol 3 names globals as text lines
    assert b"numpy._core.multiarray\n" in raw
    timed = load_timed_observation(raw.replace(b"numpy._core.multiarray\n", b"numpy.core.multiarray\n"))
    assert timed.observation["top"].shape == (3, 4, 3)


class _RunsCommand:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_would_run_a_command_is_refused_and_nothing_runs(monkeypatch, tmp_path):
    marker = tmp_path / "pwned"
    payloads = [
        pickle.dumps(_RunsCommand(marker)),
        _observation(monkeypatch, evil=_RunsCommand(marker)),  # nested inside a valid observation
        pickle.dumps({"a": 1}).replace(b"}", b"", 0),
    ]
    for payload in payloads[:2]:
        with pytest.raises(Refused, match="posix.system|os.system"):
            load_timed_observation(payload)
    assert not marker.exists()


@pytest.mark.parametrize(
    "value, message",
    [
        (np.array([1, "a"], dtype=object), "dtype 'O"),
        (np.zeros(2, dtype=[("a", "f4")]), "dtype"),
        (np.zeros(2, dtype=np.complex64), "dtype 'c8'"),
        ({1, 2}, "is a set"),
        (Path("/etc"), "pathlib"),
    ],
)
def test_anything_but_numbers_text_and_numeric_arrays_is_refused(monkeypatch, value, message):
    with pytest.raises(Refused, match=message):
        load_timed_observation(_observation(monkeypatch, extra=value))


def test_torch_tensors_are_refused_by_name(monkeypatch):
    import torch

    with pytest.raises(Refused, match="torch"):
        load_timed_observation(_observation(monkeypatch, extra=torch.zeros(3)))


def test_the_wrong_class_or_broken_bytes_are_refused(monkeypatch):
    raw = _observation(monkeypatch)
    with pytest.raises(Refused, match="expected a pickled RemotePolicyConfig"):
        load_policy_config(raw)
    with pytest.raises(Refused, match="not a readable pickle"):
        load_timed_observation(raw[: len(raw) // 2])
    lr = fake_lerobot.install(monkeypatch)
    bad = lr.TimedObservation(timestamp=1.0, timestep=-3, observation={})
    with pytest.raises(Refused, match="timestep -3"):
        load_timed_observation(pickle.dumps(bad))


def test_policy_instructions_load_with_their_features(monkeypatch):
    lr = fake_lerobot.install(monkeypatch)
    raw = pickle.dumps(
        lr.RemotePolicyConfig("act", "demo:conveyor-act", lerobot_features(10, "top:96x128"), 10, "cuda")
    )
    config = load_policy_config(raw)
    assert (config.policy_type, config.actions_per_chunk, config.device, config.rename_map) == (
        "act",
        10,
        "cuda",
        {},
    )
    assert config.lerobot_features["observation.state"].names == tuple(f"j{i}.pos" for i in range(10))
    assert config.lerobot_features["observation.images.top"].shape == (96, 128, 3)


# -- the reply --------------------------------------------------------------------------------------------
def test_the_reply_loads_as_lerobots_timed_actions(monkeypatch):
    import torch

    lr = fake_lerobot.install(monkeypatch)
    chunk = np.random.default_rng(0).normal(size=(12, 6)).astype(np.float32)
    loaded = pickle.loads(encode_actions(chunk, 40, 1000.25, 0.02))  # what the stock client does
    assert [type(a) for a in loaded] == [lr.TimedAction] * 12
    assert [a.get_timestep() for a in loaded] == list(range(40, 52))
    np.testing.assert_allclose([a.get_timestamp() for a in loaded], 1000.25 + 0.02 * np.arange(12))
    for row, timed in zip(chunk, loaded, strict=True):
        action = timed.get_action()
        assert (
            isinstance(action, torch.Tensor) and action.dtype == torch.float32 and action.device.type == "cpu"
        )
        assert action.shape == (6,)
        np.testing.assert_array_equal(action.numpy(), row)
    assert pickle.loads(encode_actions(np.zeros((0, 6)), 0, 0.0, 0.1)) == []


# -- robot keys onto the served policy --------------------------------------------------------------------
def _features(views="top:96x128,wrist:64x64", state=10):
    from hotloop.serve.lerobot.standins import RobotFeature

    return {
        k: RobotFeature(v["dtype"], tuple(v["shape"]), tuple(v["names"]))
        for k, v in lerobot_features(state, views).items()
    }


def test_robot_keys_map_to_the_policys_inputs_and_images_are_resized():
    import torch

    mapping = map_features(_features(), {}, SPEC)
    raw = {f"j{i}.pos": float(i) for i in range(10)}
    raw["top"] = np.random.default_rng(1).integers(0, 256, (96, 128, 3), dtype=np.uint8)
    raw["wrist"] = np.full((64, 64, 3), 7, np.uint8)
    raw["task"] = "pick"
    obs = mapping.observation(raw)
    np.testing.assert_array_equal(obs["state"], np.arange(10.0))
    assert obs["prompt"] == "pick" and obs["images"]["wrist"] is raw["wrist"]
    # LeRobot's resize_robot_observation_image: bilinear on the uint8 (C, H, W) image.
    expected = torch.nn.functional.interpolate(
        torch.from_numpy(raw["top"].copy()).permute(2, 0, 1)[None], size=(64, 64), mode="bilinear", align_corners=False
    )[0].permute(1, 2, 0).numpy()  # fmt: skip
    np.testing.assert_array_equal(obs["images"]["top"], expected)


@pytest.mark.parametrize(
    "features, rename, message",
    [
        (
            _features("top:96x128,wrist:64x64,side:32x32"),
            {},
            "robot's 'observation.images.side' is not an input",
        ),
        (_features("top:96x128"), {}, "reads 'images/wrist', which the robot does not declare"),
        (_features(state=6), {}, "declares 6 motor"),
        (_features("top:96x128,cam:64x64"), {"observation.images.cam": "observation.images.wrist"}, None),
    ],
)
def test_robots_that_do_not_fit_are_refused_by_name(features, rename, message):
    if message is None:
        assert map_features(features, rename, SPEC).cameras[1].robot_key == "cam"
        return
    with pytest.raises(Mismatch, match=message):
        map_features(features, rename, SPEC)


def test_observations_missing_what_was_declared_are_refused_by_name():
    mapping = map_features(_features("top:64x64,wrist:64x64"), {}, SPEC)
    raw = {f"j{i}.pos": 0.0 for i in range(10)} | {
        "top": np.zeros((64, 64, 3), np.uint8),
        "wrist": np.zeros((64, 64, 3), np.uint8),
    }
    for key, value, message in [
        ("j3.pos", None, "lacks motor"),
        ("top", np.zeros((64, 64, 3), np.float32), "float32 array"),
        ("wrist", np.zeros((32, 64, 3), np.uint8), "declared"),
        ("j1.pos", np.zeros(2), "send one number"),
    ]:
        bad = dict(raw)
        if value is None:
            del bad[key]
        else:
            bad[key] = value
        with pytest.raises(ObservationError, match=message):
            mapping.observation(bad)


def test_instructions_are_checked_against_the_served_target(monkeypatch):
    lr = fake_lerobot.install(monkeypatch)
    served = ServedPolicy("demo:conveyor-act", object(), SPEC, {"actions": ArraySpec((10, 4), "float32")})
    target = ServedTarget("demo:conveyor-act", frozenset({"demo:conveyor-act"}), "act", 10, served)

    def check(**changes):
        fields = dict(policy_type="act", pretrained_name_or_path="demo:conveyor-act",
                      lerobot_features=lerobot_features(10, "top:96x128,wrist:64x64"), actions_per_chunk=10) | changes  # fmt: skip
        return check_instructions(load_policy_config(pickle.dumps(lr.RemotePolicyConfig(**fields))), target)

    assert (
        check().actions_per_chunk == 10
        and check(policy_type="hotloop", actions_per_chunk=3).actions_per_chunk == 3
    )
    for changes, message in [
        ({"policy_type": "pi0"}, "policy_type 'pi0'.*--policy_type=act"),
        (
            {"pretrained_name_or_path": "/root/other"},
            "never loads what a client names.*--pretrained_name_or_path=demo:conveyor-act",
        ),
        ({"actions_per_chunk": 11}, "between 1 and 10"),
        ({"actions_per_chunk": 0}, "between 1 and 10"),
    ]:
        with pytest.raises(Mismatch, match=message):
            check(**changes)


# -- one client's execution -------------------------------------------------------------------------------
def _pending(timestep, must_go=False, state=(0.0,)):
    return Pending(timestep, 0.0, must_go, {}, np.asarray(state), 0.0, 0.0)


def test_admission_follows_lerobots_rules_with_the_similarity_filter_off_by_default():
    asyncio.run(_admission())


async def _admission() -> None:
    session = ClientSession("p", ExecutionConfig(obs_wait_s=0.01), None)
    assert session.admit(_pending(0, must_go=True)) == []
    assert session.admit(_pending(1)) == ["superseded"]  # newest wins
    assert (await session.take()).timestep == 1
    assert session.admit(_pending(1)) == ["duplicate_timestep"]  # that timestep ran
    assert session.admit(_pending(1, must_go=True)) == []  # must-go always runs
    assert (await session.take()).timestep == 1
    assert session.admit(_pending(2, state=(0.1,))) == []  # similar, but the filter is off
    assert await session.take() is not None and await session.take() is None


def test_skip_similar_restores_lerobots_filter_and_a_failure_lets_the_timestep_run_again():
    asyncio.run(_skip_similar())


async def _skip_similar() -> None:
    session = ClientSession("p", ExecutionConfig(skip_similar=1.0, obs_wait_s=0.01), None)
    session.admit(_pending(0, must_go=True, state=(0.0, 0.0)))
    item = await session.take()
    assert session.admit(_pending(1, state=(0.5, 0.5))) == ["similar"]
    assert session.admit(_pending(2, state=(1.0, 0.5))) == []
    session.failed(item)
    assert session.admit(_pending(0, state=(5.0, 5.0))) == ["superseded"]
    assert session.close() == 1


def test_the_clients_queue_is_replayed_with_its_weighted_average():
    queue = ClientQueue()
    queue.merge(0, np.arange(6.0)[:, None])
    queue.merge(3, np.full((6, 1), 10.0))
    # Timesteps 3-5 held both chunks: 0.3 old + 0.7 new; 6-8 only the new; 0-2 left the queue.
    np.testing.assert_allclose(
        queue.from_timestep(3)[:, 0], [0.9 + 7, 1.2 + 7, 1.5 + 7, 10, 10, 10], rtol=1e-6
    )
    assert queue.from_timestep(2) is None


def test_rtc_soft_sends_what_the_client_still_executes_and_the_measured_delay():
    session = ClientSession("p", ExecutionConfig(strategy="rtc-soft", fps=10.0), None)
    first = Pending(0, 100.0, True, {}, None, received=5.0, received_wall=100.02)
    assert session.guidance(first) == {}  # nothing known yet
    session.delivered(first, np.arange(8.0)[:, None], sent=5.11)  # 0.11 s + 2 x 0.02 s = 0.15 s: 2 periods
    guidance = session.guidance(_pending(3))
    np.testing.assert_array_equal(guidance["rtc_prev_actions"][:, 0], [3, 4, 5, 6, 7])
    assert int(guidance["rtc_delay"]) == 2 and guidance["rtc_mode"] == "soft-prefix"
    assert ClientSession("p", ExecutionConfig(), None).guidance(_pending(3)) == {}  # chunk: none


def test_mutated_pickles_are_refused_or_read_never_anything_else(monkeypatch):
    """Bytes flipped, cut or repeated in a valid observation: `Refused` or a checked observation, never
    another exception (which would be a server error instead of the client's)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    valid = _observation(monkeypatch, protocol=4)

    @settings(max_examples=300, deadline=None, derandomize=True)
    @given(
        st.lists(st.tuples(st.integers(0, len(valid) - 1), st.integers(0, 255)), max_size=6),
        st.integers(1, len(valid)),
    )
    def check(flips, cut):
        raw = bytearray(valid[:cut])
        for at, value in flips:
            if at < len(raw):
                raw[at] = value
        try:
            timed = load_timed_observation(bytes(raw))
        except Refused:
            return
        assert isinstance(timed.observation, dict) and isinstance(timed.timestep, int)

    check()


def test_an_artifact_accepts_its_source_checkpoints_type(tmp_path):
    """A compiled artifact holds a config.json of type `hotloop` (LeRobot's plugin reads it): the server
    still accepts the type of the checkpoint it was compiled from, which a stock client names."""
    source = tmp_path / "ckpt"
    source.mkdir()
    (source / "config.json").write_text(json.dumps({"type": "act"}))
    art = tmp_path / "art"
    art.mkdir()
    (art / "manifest.json").write_text(json.dumps({"target": str(source), "kind": "act"}))
    (art / "config.json").write_text(json.dumps({"type": "hotloop", "source_type": "act"}))
    assert _lerobot_type(str(art)) == "act"
    shutil.rmtree(source)  # the source gone: the plugin config's source_type says it
    (art / "manifest.json").write_text(json.dumps({"target": str(source)}))
    assert _lerobot_type(str(art)) == "act"
