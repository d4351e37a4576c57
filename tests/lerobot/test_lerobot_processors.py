"""Processor files written in tmp_path exactly as LeRobot writes them, read back and run, checked against a
hand computation of LeRobot's arithmetic (numpy float32, same operation order): no fixtures needed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from hotloop.errors import ConfigError
from hotloop.lerobot.features import NormMode
from hotloop.lerobot.processors import read_pipeline, read_policy_processors
from hotloop.lerobot.steps import Transition

EPS = np.float32(1e-8)
F32 = np.float32


def _a(values: list[float]) -> np.ndarray:
    return np.array(values, dtype=F32)


def _stats(rng: np.random.Generator, dim: int, zero_range_at: int) -> dict[str, np.ndarray]:
    """Every statistic LeRobot can hold, with one dimension whose ranges are exactly zero."""
    mean = rng.normal(size=dim).astype(F32)
    std = rng.uniform(0.2, 2.0, size=dim).astype(F32)
    std[-1] = 3e-7  # small enough that + eps (1e-8) changes it at float32: eps placement is visible
    out = {"mean": mean, "std": std}
    for low, high in (("min", "max"), ("q01", "q99"), ("q10", "q90")):
        lo = (mean - rng.uniform(1.0, 2.0, size=dim)).astype(F32)
        hi = (mean + rng.uniform(1.0, 2.0, size=dim)).astype(F32)
        hi[zero_range_at] = lo[zero_range_at]
        out[low], out[high] = lo, hi
    return out


def _hand(x: np.ndarray, mode: str, s: dict[str, np.ndarray], inverse: bool) -> np.ndarray:
    """LeRobot's _apply_transform, written out in numpy float32."""
    if mode == "IDENTITY":
        return x
    if mode == "MEAN_STD":
        return x * s["std"] + s["mean"] if inverse else (x - s["mean"]) / (s["std"] + EPS)
    low, high = {"MIN_MAX": ("min", "max"), "QUANTILES": ("q01", "q99"), "QUANTILE10": ("q10", "q90")}[mode]
    denom = s[high] - s[low]
    denom = np.where(denom == 0, EPS, denom).astype(F32)
    if mode == "MIN_MAX":
        return (x + F32(1)) / F32(2) * denom + s[low] if inverse else F32(2) * (x - s[low]) / denom - F32(1)
    return (x + F32(1)) * denom / F32(2) + s[low] if inverse else F32(2) * (x - s[low]) / denom - F32(1)


def _write_policy(
    files: Any, folder: Path, mode: str, stats: dict[str, dict[str, np.ndarray]], visual_mode: str
) -> None:
    features = {
        "observation.state": ("STATE", [5]),
        "observation.images.front": ("VISUAL", [3, 4, 6]),
        "action": ("ACTION", [5]),
    }
    norm_map = {"VISUAL": visual_mode, "STATE": mode, "ACTION": mode}
    tensors = files.stats({k: {n: torch.from_numpy(v) for n, v in sub.items()} for k, sub in stats.items()})
    files.pipeline(
        folder,
        "policy_preprocessor",
        [
            ("rename_observations_processor", {"rename_map": {}}, None),
            ("to_batch_processor", {}, None),
            ("device_processor", {"device": "cuda", "float_dtype": None}, None),
            ("normalizer_processor", files.normalizer_config(features, norm_map), tensors),
        ],
    )
    files.pipeline(
        folder,
        "policy_postprocessor",
        [
            (
                "unnormalizer_processor",
                files.normalizer_config({"action": features["action"]}, norm_map),
                tensors,
            ),
            ("device_processor", {"device": "cpu", "float_dtype": None}, None),
        ],
    )


@pytest.mark.parametrize("mode", [m.value for m in NormMode])
@pytest.mark.parametrize("visual_stats_shape", ["flat", "per_channel"])
def test_every_mode_matches_the_hand_computation(
    files: Any, tmp_path: Path, mode: str, visual_stats_shape: str
) -> None:
    rng = np.random.default_rng(7)
    image_stats = _stats(rng, 3, zero_range_at=1)
    if visual_stats_shape == "per_channel":  # compute_stats writes (C, 1, 1); RL configs give (C,)
        image_stats = {k: v.reshape(3, 1, 1) for k, v in image_stats.items()}
    stats = {"observation.state": _stats(rng, 5, 2), "action": _stats(rng, 5, 4)}
    stats["observation.images.front"] = image_stats
    _write_policy(files, tmp_path, mode, stats, visual_mode="MEAN_STD")
    pre, post = read_policy_processors(tmp_path)

    state = rng.normal(size=(2, 5)).astype(F32) * 3
    state[:, 2] = stats["observation.state"]["min"][2]  # on the zero range: LeRobot maps it to -1
    image = rng.uniform(size=(2, 3, 4, 6)).astype(F32)
    action = rng.normal(size=(2, 5)).astype(F32)
    out = pre({"observation.state": state, "observation.images.front": image, "action": action})
    np.testing.assert_array_equal(
        out["observation.state"].numpy(), _hand(state, mode, stats["observation.state"], False)
    )
    per_channel = {k: v.reshape(3, 1, 1) for k, v in image_stats.items()}
    np.testing.assert_array_equal(
        out["observation.images.front"].numpy(), _hand(image, "MEAN_STD", per_channel, False)
    )
    np.testing.assert_array_equal(out["action"].numpy(), _hand(action, mode, stats["action"], False))

    chunk = rng.normal(size=(2, 7, 5)).astype(F32)  # (B, chunk, A) and (B, A) both broadcast
    for model_actions in (chunk, chunk[:, 0]):
        got = post.action(model_actions)
        assert got.dtype == torch.float32
        np.testing.assert_array_equal(got.numpy(), _hand(model_actions, mode, stats["action"], True))


def test_history_and_unbatched_inputs(files: Any, tmp_path: Path) -> None:
    """A (B, T, D) state history broadcasts against (D,) stats; a 1-D state and a 3-D image gain a batch axis."""
    rng = np.random.default_rng(3)
    stats = {"observation.state": _stats(rng, 5, 0), "action": _stats(rng, 5, 0)}
    stats["observation.images.front"] = _stats(rng, 3, 0)
    _write_policy(files, tmp_path, "MIN_MAX", stats, visual_mode="IDENTITY")
    pre = read_pipeline(tmp_path, "policy_preprocessor")
    history = rng.normal(size=(2, 3, 5)).astype(F32)
    out = pre({"observation.state": history})
    np.testing.assert_array_equal(
        out["observation.state"].numpy(), _hand(history, "MIN_MAX", stats["observation.state"], False)
    )
    single = pre({"observation.state": history[0, 0], "observation.images.front": np.ones((3, 4, 6), F32)})
    assert tuple(single["observation.state"].shape) == (1, 5)
    assert tuple(single["observation.images.front"].shape) == (1, 3, 4, 6)


def test_identity_and_unmapped_types_pass_through_untouched(files: Any, tmp_path: Path) -> None:
    """IDENTITY images (even uint8) and a feature type absent from norm_map need no statistics."""
    features = {
        "observation.images.cam": ("VISUAL", [3, 2, 2]),
        "observation.environment_state": ("ENV", [2]),
        "observation.state": ("STATE", [2]),
    }
    config = files.normalizer_config(features, {"VISUAL": "IDENTITY", "STATE": "MEAN_STD"})
    state_stats = {"observation.state": {"mean": torch.tensor([1.0, 2.0]), "std": torch.tensor([2.0, 4.0])}}
    files.pipeline(
        tmp_path, "policy_preprocessor", [("normalizer_processor", config, files.stats(state_stats))]
    )
    pre = read_pipeline(tmp_path, "policy_preprocessor")
    image = np.arange(12, dtype=np.uint8).reshape(1, 3, 2, 2)
    env = np.array([[5.0, -5.0]], F32)
    out = pre(
        {"observation.images.cam": image, "observation.environment_state": env, "observation.state": env}
    )
    assert out["observation.images.cam"].dtype == torch.uint8
    np.testing.assert_array_equal(out["observation.images.cam"].numpy(), image)
    np.testing.assert_array_equal(out["observation.environment_state"].numpy(), env)
    np.testing.assert_array_equal(out["observation.state"].numpy(), (env - _a([1, 2])) / (_a([2, 4]) + EPS))


def test_float64_inputs_compute_in_float64_unless_the_device_step_casts(files: Any, tmp_path: Path) -> None:
    """LeRobot casts the stats to the input's dtype; device_processor float_dtype 'float32' casts first."""
    rng = np.random.default_rng(5)
    stats = {"observation.state": _stats(rng, 5, 0), "action": _stats(rng, 5, 0)}
    stats["observation.images.front"] = _stats(rng, 3, 0)
    _write_policy(files, tmp_path, "MEAN_STD", stats, visual_mode="IDENTITY")
    state = rng.normal(size=(1, 5))
    out = read_pipeline(tmp_path, "policy_preprocessor")({"observation.state": state})["observation.state"]
    s = {k: v.astype(np.float64) for k, v in stats["observation.state"].items()}
    assert out.dtype == torch.float64
    np.testing.assert_array_equal(out.numpy(), (state - s["mean"]) / (s["std"] + 1e-8))

    text = (
        (tmp_path / "policy_preprocessor.json")
        .read_text()
        .replace('"float_dtype": null', '"float_dtype": "float32"')
    )
    (tmp_path / "policy_preprocessor.json").write_text(text)
    out = read_pipeline(tmp_path, "policy_preprocessor")({"observation.state": state})["observation.state"]
    assert out.dtype == torch.float32
    np.testing.assert_array_equal(
        out.numpy(), _hand(state.astype(F32), "MEAN_STD", stats["observation.state"], False)
    )


def test_rename_then_normalise_under_the_new_name(files: Any, tmp_path: Path) -> None:
    config = files.normalizer_config({"observation.state": ("STATE", [2])}, {"STATE": "MEAN_STD"}, eps=0.5)
    stats = {"observation.state": {"mean": torch.tensor([1.0, 1.0]), "std": torch.tensor([0.5, 1.5])}}
    files.pipeline(
        tmp_path,
        "policy_preprocessor",
        [
            (
                "rename_observations_processor",
                {"rename_map": {"observation.joints": "observation.state"}},
                None,
            ),
            ("normalizer_processor", config, files.stats(stats)),
        ],
    )
    pre = read_pipeline(tmp_path, "policy_preprocessor")
    x = np.array([[3.0, 4.0]], F32)
    out = pre({"observation.joints": x, "observation.joints_is_pad": np.array([False])})
    # eps is read from the file: 0.5, not the default 1e-8
    np.testing.assert_array_equal(
        out["observation.state"].numpy(), (x - F32(1)) / (_a([0.5, 1.5]) + F32(0.5))
    )
    assert "observation.state_is_pad" in out and "observation.joints" not in out


def test_normalize_observation_keys_limits_the_observations(files: Any, tmp_path: Path) -> None:
    features = {"observation.state": ("STATE", [1]), "observation.environment_state": ("ENV", [1])}
    config = files.normalizer_config(features, {"STATE": "MEAN_STD", "ENV": "MEAN_STD"})
    config["normalize_observation_keys"] = ["observation.state"]
    stats = {"observation.state": {"mean": torch.tensor([1.0]), "std": torch.tensor([2.0])}}
    files.pipeline(tmp_path, "policy_preprocessor", [("normalizer_processor", config, files.stats(stats))])
    out = read_pipeline(tmp_path, "policy_preprocessor")(
        {"observation.state": np.array([[3.0]], F32), "observation.environment_state": np.array([[3.0]], F32)}
    )
    np.testing.assert_array_equal(out["observation.state"].numpy(), [[F32(2) / (F32(2) + EPS)]])
    np.testing.assert_array_equal(out["observation.environment_state"].numpy(), [[3.0]])


def _pi_policy(files: Any, folder: Path, enabled: bool, mode: str = "MEAN_STD") -> None:
    """pi0's layout: ... device -> relative_actions -> normalize; unnormalize -> absolute_actions -> device."""
    feats = {"observation.state": ("STATE", [3]), "action": ("ACTION", [3])}
    norm = files.normalizer_config(feats, {"STATE": mode, "ACTION": mode})
    stats = files.stats(
        {
            "observation.state": {"mean": torch.zeros(3), "std": torch.full((3,), 2.0)},
            "action": {"mean": torch.tensor([1.0, 2.0, 3.0]), "std": torch.tensor([0.5, 0.5, 0.5])},
        }
    )
    relative = {
        "enabled": enabled,
        "exclude_joints": ["gripper"],
        "action_names": ["j0", "left_gripper", "j2"],
    }
    files.pipeline(
        folder,
        "policy_preprocessor",
        [
            ("to_batch_processor", {}, None),
            ("device_processor", {"device": "cpu", "float_dtype": None}, None),
            ("relative_actions_processor", relative, None),
            ("normalizer_processor", norm, stats),
        ],
    )
    files.pipeline(
        folder,
        "policy_postprocessor",
        [
            (
                "unnormalizer_processor",
                files.normalizer_config({"action": feats["action"]}, norm["norm_map"]),
                stats,
            ),
            ("absolute_actions_processor", {"enabled": enabled}, None),
            ("device_processor", {"device": "cpu", "float_dtype": None}, None),
        ],
    )


def test_relative_actions_add_back_the_raw_state_on_the_masked_joints(files: Any, tmp_path: Path) -> None:
    _pi_policy(files, tmp_path, enabled=True)
    pre, post = read_policy_processors(tmp_path)
    state = np.array([10.0, 20.0, 30.0], F32)
    pre({"observation.state": state})
    model = np.zeros((1, 4, 3), F32)
    raw = post.action(model).numpy()
    # unnormalised = 0 * 0.5 + mean; then + raw state on j0 and j2 ("left_gripper" is excluded)
    np.testing.assert_array_equal(raw, np.broadcast_to(_a([1 + 10, 2, 3 + 30]), (1, 4, 3)))
    # the training direction: an action given to the preprocessor becomes relative before normalising
    out = pre({"observation.state": state, "action": np.array([11.0, 22.0, 33.0], F32)})
    np.testing.assert_array_equal(
        out["action"].numpy(), [(_a([1, 22, 3]) - _a([1, 2, 3])) / (F32(0.5) + EPS)]
    )


def test_disabled_relative_actions_change_nothing_and_an_unpaired_one_is_refused(
    files: Any, tmp_path: Path
) -> None:
    _pi_policy(files, tmp_path / "off", enabled=False)
    _, post = read_policy_processors(tmp_path / "off")
    np.testing.assert_array_equal(post.action(np.zeros((1, 3), F32)).numpy(), [[1.0, 2.0, 3.0]])
    _pi_policy(files, tmp_path / "on", enabled=True)
    lone = read_pipeline(tmp_path / "on", "policy_postprocessor")
    with pytest.raises(ConfigError, match=r"policy_postprocessor.json step 1 \(absolute_actions_processor\)"):
        lone.action(np.zeros((1, 3), F32))
    _, post = read_policy_processors(tmp_path / "on")
    with pytest.raises(ConfigError, match="run the preprocessor first"):
        post.action(np.zeros((1, 3), F32))


def test_bad_inputs_are_named_at_call_time(files: Any, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    stats = {"observation.state": _stats(rng, 5, 0), "action": _stats(rng, 5, 0)}
    stats["observation.images.front"] = _stats(rng, 3, 0)
    _write_policy(files, tmp_path, "MEAN_STD", stats, visual_mode="MEAN_STD")
    pre = read_pipeline(tmp_path, "policy_preprocessor")
    where = r"policy_preprocessor.json step 3 \(normalizer_processor\)"
    with pytest.raises(ConfigError, match=where + ".*uint8.*needs floats"):
        pre({"observation.images.front": np.zeros((1, 3, 4, 6), np.uint8)})
    with pytest.raises(ConfigError, match=where + r".*shape \(1, 4\).*observation.state.mean"):
        pre({"observation.state": np.zeros((1, 4), F32)})
    with pytest.raises(ConfigError, match=where + r".*shape \(1, 1\)"):  # would silently broadcast to (1, 5)
        pre({"observation.state": np.zeros((1, 1), F32)})
    with pytest.raises(ConfigError, match=r"step 0 \(rename_observations_processor\).*no 'observation"):
        pre({"task": "pick"})


def test_images_of_another_size_than_the_config_are_normalised_per_channel(
    files: Any, tmp_path: Path
) -> None:
    """The config's image shape is the training size; per-channel stats fit any H, W (the policy resizes)."""
    rng = np.random.default_rng(2)
    stats = {"observation.state": _stats(rng, 5, 0), "action": _stats(rng, 5, 0)}
    stats["observation.images.front"] = _stats(rng, 3, 0)
    _write_policy(files, tmp_path, "MEAN_STD", stats, visual_mode="MEAN_STD")
    image = rng.uniform(size=(1, 3, 9, 5)).astype(F32)
    out = read_pipeline(tmp_path, "policy_preprocessor")({"observation.images.front": image})
    per_channel = {k: v.reshape(3, 1, 1) for k, v in stats["observation.images.front"].items()}
    np.testing.assert_array_equal(
        out["observation.images.front"].numpy(), _hand(image, "MEAN_STD", per_channel, False)
    )


def test_pi05_state_prompt_is_openpi_text(files: Any, tmp_path: Path) -> None:
    """Normalised state -> 256 bins by np.digitize (no clipping: below -1 reads "-1"), in pi0.5's prompt."""
    feats = {"observation.state": ("STATE", [4])}
    norm = files.normalizer_config(feats, {"STATE": "QUANTILES"})
    stats = files.stats({"observation.state": {"q01": -torch.ones(4), "q99": torch.ones(4)}})
    files.pipeline(
        tmp_path,
        "policy_preprocessor",
        [
            ("to_batch_processor", {}, None),
            ("normalizer_processor", norm, stats),
            ("pi05_prepare_state_tokenizer_processor_step", {}, None),
        ],
    )
    pre = read_pipeline(tmp_path, "policy_preprocessor")
    state = np.array([-1.5, -1.0, 0.0, 0.999], F32)  # normalised: 2*(x+1)/2 - 1 = x
    out = pre({"observation.state": state, "task": "pick_up the\ncube \n"})
    edges = np.linspace(-1, 1, 257)[:-1]
    bins = np.digitize(state, edges) - 1
    assert bins.tolist() == [-1, 0, 128, 255]
    assert out["task"] == ["Task: pick up the cube, State: -1 0 128 255;\nAction: "]


def test_pi05_prompt_without_state_when_configured(tmp_path: Path) -> None:
    from hotloop.lerobot.steps import Pi05StatePrompt

    step = Pi05StatePrompt("x", max_state_dim=32, task_key="task", include_state_in_prompt=False)
    t = step(Transition({"observation.state": torch.zeros(1, 2)}, None, {"task": ["open door"]}))
    assert t.complementary["task"] == ["Task: open door;\nAction: "]


def test_the_registered_to_batch_sub_steps_do_only_their_part(files: Any, tmp_path: Path) -> None:
    files.pipeline(
        tmp_path,
        "policy_preprocessor",
        [("to_batch_processor_observation", {}, None), ("to_batch_processor_complementary_data", {}, None)],
    )
    out = read_pipeline(tmp_path, "policy_preprocessor")(
        {"observation.state": np.zeros(3, F32), "action": np.zeros(3, F32), "task": "go"}
    )
    assert tuple(out["observation.state"].shape) == (1, 3) and out["task"] == ["go"]
    assert tuple(out["action"].shape) == (3,)  # the action sub-step is not in this pipeline
    files.pipeline(tmp_path, "policy_preprocessor", [("to_batch_processor_action", {}, None)])
    only_action = read_pipeline(tmp_path, "policy_preprocessor")
    assert tuple(only_action.action(np.zeros(3, F32)).shape) == (1, 3)
    with pytest.raises(ConfigError, match=r"step 0 \(to_batch_processor_action\): needs an action"):
        only_action({"observation.state": np.zeros(3, F32)})
