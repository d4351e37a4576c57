"""sample_actions checks its inputs once, naming the input and the fix (defect 6 of issue 11)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hotloop.errors import ConfigError
from hotloop.families.pi.sampling import PiObservation, make_noise, sample_actions
from hotloop.models.configs import get_pi_config
from hotloop.models.pi0 import PiModel, init_weights


@pytest.fixture(scope="module")
def model() -> PiModel:
    return init_weights(PiModel(get_pi_config("pi0:tiny")), torch.Generator().manual_seed(0)).eval()


def _obs(model: PiModel, batch: int = 2) -> PiObservation:
    cfg = model.cfg
    g = torch.Generator().manual_seed(1)
    s = cfg.vision.image_size
    return PiObservation(
        images=torch.rand(batch, cfg.views, 3, s, s, generator=g) * 2 - 1,
        image_masks=torch.ones(batch, cfg.views, dtype=torch.bool),
        lang_tokens=torch.randint(0, cfg.vocab_size, (batch, cfg.max_token_len), generator=g),
        lang_masks=torch.ones(batch, cfg.max_token_len, dtype=torch.bool),
        state=torch.randn(batch, cfg.max_state_dim, generator=g),
    )


Edit = Callable[[PiObservation], PiObservation]
CASES: list[tuple[str, Edit, str]] = [
    (
        "small images",
        lambda o: replace(o, images=o.images[..., :28, :28]),
        r"obs.images has shape \(2, 1, 3, 28, 28\); the model takes \(B, 1, 3, 56, 56\): resize to 56 px",
    ),
    (
        "extra view",
        lambda o: replace(o, images=o.images.repeat(1, 2, 1, 1, 1)),
        r"pad absent views .* to exactly 1",
    ),
    (
        "uint8 images",
        lambda o: replace(o, images=((o.images + 1) * 127.5).to(torch.uint8)),
        r"obs.images is uint8; the model takes floats in \[-1, 1\]",
    ),
    (
        "0-255 floats",
        lambda o: replace(o, images=(o.images + 1) * 127.5),
        r"obs.images must lie in \[-1, 1\]; found values in \[.*\] \(0-255 pixels\?",
    ),
    (
        "NaN images",
        lambda o: replace(o, images=o.images.clone().fill_(float("nan"))),
        r"obs.images must lie in \[-1, 1\]",
    ),
    (
        "too many tokens",
        lambda o: replace(o, lang_tokens=o.lang_tokens.repeat(1, 2), lang_masks=o.lang_masks.repeat(1, 2)),
        r"obs.lang_tokens has 24 tokens; the model takes at most max_token_len 12",
    ),
    (
        "float tokens",
        lambda o: replace(o, lang_tokens=o.lang_tokens.float()),
        r"obs.lang_tokens is float32; token ids are integers",
    ),
    (
        "id past vocab",
        lambda o: replace(o, lang_tokens=o.lang_tokens.clone().fill_(1024)),
        r"ids in \[1024, 1024\]; the vocabulary is \[0, 1024\)",
    ),
    ("negative id", lambda o: replace(o, lang_tokens=o.lang_tokens.clone().fill_(-3)), r"ids in \[-3, -3\]"),
    (
        "short prompt",
        lambda o: replace(o, lang_tokens=o.lang_tokens[:, :5], lang_masks=o.lang_masks[:, :5]),
        r"pad shorter prompts to max_token_len with lang_masks False",
    ),
    (
        "mask batch",
        lambda o: replace(o, image_masks=o.image_masks[:1]),
        r"obs.image_masks has shape \(1, 1\); expected \(2, 1\)",
    ),
    ("int masks", lambda o: replace(o, lang_masks=o.lang_masks.long()), r"obs.lang_masks must be bool"),
    ("no state", lambda o: replace(o, state=None), r"pi0 needs obs.state \(B, 32\)"),
    (
        "state width",
        lambda o: replace(o, state=o.state[:, :7]),
        r"obs.state has shape \(2, 7\); expected \(2, 32\): zero-pad",
    ),
]


@pytest.mark.parametrize(("label", "edit", "match"), CASES, ids=[c[0] for c in CASES])
def test_bad_observations_are_named(model: PiModel, label: str, edit: Edit, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        sample_actions(model, edit(_obs(model)), num_steps=1)


@pytest.mark.parametrize("steps", [-1, 0, 2.5, True])
def test_num_steps_must_be_positive(model: PiModel, steps: object) -> None:
    """num_steps=-1 used to return the noise itself as the actions."""
    with pytest.raises(ConfigError, match=r"num_steps must be a positive integer"):
        sample_actions(model, _obs(model), num_steps=steps)  # type: ignore[arg-type]


def test_noise_and_cache_must_match_the_batch(model: PiModel) -> None:
    obs = _obs(model)
    with pytest.raises(ConfigError, match=r"noise has shape \(3, 10, 32\); expected \(2, 10, 32\)"):
        sample_actions(model, obs, noise=make_noise(model, 3))
    with pytest.raises(ConfigError, match=r"cache was allocated for batch 1.*model.allocate_cache\(2\)"):
        sample_actions(model, obs, cache=model.allocate_cache(1))


def test_valid_inputs_pass_and_validate_false_skips_the_check(model: PiModel) -> None:
    obs = _obs(model)
    out = sample_actions(model, obs, num_steps=2, noise=make_noise(model, 2))
    assert out.shape == (2, 10, 32) and torch.isfinite(out).all()
    # The switch for compiled engines: the caller owns the check (here NaN images go through unchecked).
    bad = replace(obs, images=obs.images.clone().fill_(float("nan")))
    assert torch.isnan(sample_actions(model, bad, num_steps=1, validate=False)).all()


# ---- property-based: any perturbation of the model-space inputs --------------------------------------

TENSOR_DTYPES = st.sampled_from(
    [torch.float32, torch.float64, torch.int64, torch.uint8, torch.bool, torch.bfloat16]
)


@st.composite
def perturbed(draw: st.DrawFn) -> tuple[str, tuple[int, ...], torch.dtype, float]:
    field = draw(st.sampled_from(["images", "image_masks", "lang_tokens", "lang_masks", "state", "noise"]))
    rank = draw(st.integers(0, 5))
    shape = tuple(draw(st.lists(st.integers(0, 3), min_size=rank, max_size=rank)))
    return field, shape, draw(TENSOR_DTYPES), draw(st.floats(-300, 300) | st.just(float("nan")))


@settings(max_examples=60, deadline=None)
@given(change=st.none() | perturbed(), steps=st.none() | st.integers(-2, 3))
def test_any_inputs_are_sampled_or_named(model: PiModel, change: Any, steps: int | None) -> None:
    obs, noise = _obs(model), make_noise(model, 2)
    if change is not None:
        field, shape, dtype, value = change
        bad = torch.full(shape, value).to(dtype)
        if field == "noise":
            noise = bad
        else:
            obs = replace(obs, **{field: bad})
    try:
        out = sample_actions(model, obs, noise=noise, num_steps=steps)
    except ConfigError as exc:
        assert "\n" not in str(exc) and str(exc)
    else:
        assert out.shape == (2, 10, 32)
