"""PiPolicy checks a raw observation at its entry point and names the bad input (defect 6 of issue 11)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from hotloop.errors import ConfigError
from hotloop.families.pi.policy import PiPolicy
from hotloop.families.pi.targets import build_pi0_policy, build_pi05_policy
from hotloop.targets import TargetOptions


@pytest.fixture(scope="module")
def pi0() -> PiPolicy:
    return build_pi0_policy("tiny", TargetOptions(num_steps=1))


@pytest.fixture(scope="module")
def pi05() -> PiPolicy:
    return build_pi05_policy("tiny", TargetOptions(num_steps=1))


def _obs(**over: Any) -> dict[str, Any]:
    obs: dict[str, Any] = {
        "images": np.full((1, 40, 60, 3), 128, np.uint8),
        "state": np.zeros(5, np.float32),
        "prompt_tokens": [4, 5, 6],
    }
    obs.update(over)
    return obs


BAD: list[tuple[str, dict[str, Any], str]] = [
    (
        "extra views",
        {"images": np.zeros((2, 56, 56, 3), np.uint8)},
        r"obs\['images'\] has 2 camera views; the model takes at most 1",
    ),
    (
        "channels first",
        {"images": np.zeros((1, 3, 56, 56), np.uint8)},
        r"must be \(views, H, W, 3\) RGB; got shape \(1, 3, 56, 56\)",
    ),
    ("empty image", {"images": np.zeros((1, 0, 56, 3), np.uint8)}, r"must be \(views, H, W, 3\) RGB"),
    (
        "0-255 floats",
        {"images": np.full((1, 56, 56, 3), 200.0)},
        r"floats must lie in \[0, 1\]; found values in \[200, 200\] \(0-255 pixels\? pass them as uint8\)",
    ),
    ("[-1, 1] floats", {"images": np.full((1, 56, 56, 3), -0.5)}, r"\(\[-1, 1\]\? map with \(x \+ 1\) / 2\)"),
    ("NaN image", {"images": np.full((1, 56, 56, 3), np.nan)}, r"floats must lie in \[0, 1\]"),
    (
        "int64 pixels",
        {"images": np.zeros((1, 56, 56, 3), np.int64)},
        r"uint8 pixels or floats in \[0, 1\] \(got int64\)",
    ),
    (
        "float tokens",
        {"prompt_tokens": [1.5, 2.0]},
        r"obs\['prompt_tokens'\] must be integer token ids \(got float64\)",
    ),
    ("string tokens", {"prompt_tokens": ["a"]}, r"must be integer token ids"),
    (
        "id past vocab",
        {"prompt_tokens": [5000]},
        r"prompt token ids must lie in \[0, 1024\) for this model; found \[5000, 5000\]",
    ),
    ("negative id", {"prompt_tokens": [-1]}, r"prompt token ids must lie in"),
    (
        "too many tokens",
        {"prompt_tokens": list(range(40))},
        r"the prompt needs 40 tokens \(40 ids\); the model takes at most 12",
    ),
    ("state text", {"state": "fast"}, r"obs\['state'\] must be a vector of numbers \(got str\)"),
    ("state 2-D", {"state": np.zeros((2, 2))}, r"obs\['state'\] must be a 1-D vector"),
    ("state too long", {"state": np.zeros(40)}, r"obs\['state'\] has 40 entries; the model takes at most 32"),
    ("state NaN", {"state": np.array([np.nan])}, r"obs\['state'\] holds NaN"),
]


@pytest.mark.parametrize(("label", "over", "match"), BAD, ids=[b[0] for b in BAD])
def test_pi0_policy_names_the_bad_input(pi0: PiPolicy, label: str, over: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        pi0.infer(_obs(**over))


def test_missing_images_and_not_a_dict(pi0: PiPolicy) -> None:
    with pytest.raises(ConfigError, match=r"obs must be a dict with 'images'"):
        pi0.infer({"state": np.zeros(3)})
    with pytest.raises(ConfigError, match=r"obs must be a dict"):
        pi0.infer([1, 2])  # type: ignore[arg-type]


def test_pi05_counts_the_state_bins_in_the_prompt(pi05: PiPolicy) -> None:
    """pi0.5 used to cut the state tokens off silently when prompt + state exceeded max_token_len."""
    with pytest.raises(
        ConfigError, match=r"needs 13 tokens \(3 prompt ids \+ 10 state bins\); .* at most 12"
    ):
        pi05.infer(_obs(state=np.zeros(10)))
    with pytest.raises(ConfigError, match=r"must lie in \[0, 768\)"):  # ids >= 768 are the state bins
        pi05.infer(_obs(prompt_tokens=[800]))
    assert pi05.infer(_obs(state=np.zeros(9)))["actions"].shape == (10, 32)


def test_good_inputs_in_each_accepted_form(pi0: PiPolicy) -> None:
    for images in (np.zeros((40, 60, 3), np.uint8), np.full((1, 56, 56, 3), 0.5, np.float32)):
        out = pi0.infer(_obs(images=images))["actions"]
        assert out.shape == (10, 32) and np.isfinite(out).all()


@pytest.mark.parametrize("name", ["num_steps", "horizon", "action_dim"])
def test_policy_sizes_must_be_positive(pi0: PiPolicy, name: str) -> None:
    with pytest.raises(ConfigError, match=rf"PiPolicy {name} must be a positive integer \(got -1\)"):
        PiPolicy(pi0.model, pi0.config, **{name: -1})


# ---- property-based: any raw observation ------------------------------------------------------------

DTYPES = st.sampled_from([np.uint8, np.float32, np.float64, np.int64, np.bool_, np.float16])
IMAGES = DTYPES.flatmap(
    lambda dt: hnp.arrays(
        dt,
        st.sampled_from(
            [(1, 8, 12, 3), (8, 8, 3), (2, 8, 8, 3), (1, 8, 8, 4), (1, 3, 8, 8), (0, 8, 8, 3), (8, 8)]
        ),
        elements=hnp.from_dtype(np.dtype(dt), allow_nan=True) if np.dtype(dt).kind == "f" else None,
    )
)
TOKENS = (
    st.lists(st.integers(-5, 1100), max_size=16)
    | st.lists(st.floats(allow_nan=True), max_size=3)
    | st.text(max_size=3)
)
STATES = (
    st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), max_size=40)
    | st.text(max_size=3)
    | st.none()
)


@settings(max_examples=60, deadline=None)
@given(images=IMAGES, tokens=TOKENS, state=STATES)
def test_any_raw_observation_is_answered_or_named(
    pi0: PiPolicy, images: np.ndarray, tokens: Any, state: Any
) -> None:
    policy = pi0
    obs: dict[str, Any] = {"images": images, "prompt_tokens": tokens}
    if state is not None:
        obs["state"] = state
    try:
        out = policy.infer(obs)["actions"]
    except ConfigError as exc:
        assert "\n" not in str(exc) and str(exc)
    else:
        assert out.shape == (10, 32) and np.isfinite(out).all()
