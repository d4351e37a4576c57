"""What the families share (`hotloop.families.adapter`, `batching`, `pipeline`, `one_pass`): every family's
parts agree with what it declares, observations batch and slice by their fields, refusals name the value."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
import torch
from torch import Tensor

from hotloop.errors import ConfigError
from hotloop.families import FAMILIES, get_family
from hotloop.families.adapter import FamilyAdapter
from hotloop.families.batching import batch_size, select, stack, to_device
from hotloop.families.toy.engines import ToyEngineShape, ToyPipeline
from hotloop.models.toy import ToyConfig, ToyMLPPolicy


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_familys_parts_agree_with_what_it_declares(name: str) -> None:
    family = get_family(name)
    assert isinstance(family, FamilyAdapter)
    parts = family.parts()
    assert parts.pipeline.stages == family.stages  # type: ignore[attr-defined]
    assert tuple(parts.recipes) == family.capabilities.recipes
    # Every field without a default set (a one-pass shape's num_steps keeps its 1): read back from a manifest.
    shape = parts.shape(
        **{f.name: 2 for f in dataclasses.fields(parts.shape) if f.default is dataclasses.MISSING}
    )
    assert family.shape_from_dict(dataclasses.asdict(shape)) == shape


@dataclass
class Cameras:
    images: tuple[Tensor, ...]
    state: Tensor | None = None
    env_state: Tensor | None = None


def test_observations_stack_select_and_move_by_their_fields() -> None:
    one = [
        Cameras((torch.full((1, 3), float(i)), torch.full((1, 2), -float(i))), torch.full((1, 4), i))
        for i in range(3)
    ]
    batch = stack(one)
    assert batch_size(batch) == 3 and batch.env_state is None and batch.state is not None
    assert batch.images[1][:, 0].tolist() == [0.0, -1.0, -2.0] and batch.state[:, 0].tolist() == [0, 1, 2]
    rows = select(batch, [2, 0])
    assert rows.state is not None
    assert rows.images[0][:, 0].tolist() == [2.0, 0.0] and rows.state[:, 0].tolist() == [2, 0]
    assert to_device(rows, "cpu").images[0].device.type == "cpu"
    # An input one observation lacks is left out of the batch, as pi's state of pi0.5 observations.
    assert (
        stack([Cameras((torch.zeros(1, 3),), None), Cameras((torch.zeros(1, 3),), torch.zeros(1, 4))]).state
        is None
    )
    with pytest.raises(ConfigError, match="holds no input"):
        batch_size(Cameras(()))
    with pytest.raises(ConfigError, match="empty list"):
        stack([])


def test_an_unknown_recipe_and_missing_runners_are_refused_by_name() -> None:
    family = get_family("toy")
    model = ToyMLPPolicy(ToyConfig(state_dim=4, hidden=8, depth=2, horizon=2, action_dim=3))
    with pytest.raises(ConfigError, match="the toy family has the recipes plain only \\(got 'fused'\\)"):
        family.build_subengines(model, ToyEngineShape(1), torch.float32, recipe="fused")
    engines = family.build_subengines(model, ToyEngineShape(1), torch.float32)
    with pytest.raises(ConfigError, match="the toy pipeline needs runners for head"):
        ToyPipeline(model.config, ToyEngineShape(1), {"encoder": engines["encoder"].module}, {}, {})
    with pytest.raises(ConfigError, match="one pass"):
        family.with_steps(ToyEngineShape(1), 4)
    with pytest.raises(ConfigError, match="ToyEngineShape.batch must be a positive integer"):
        ToyEngineShape(0)


def test_prompt_buckets_come_with_the_capability_and_only_with_it() -> None:
    pi, toy = get_family("pi"), get_family("toy")
    with pytest.raises(ConfigError, match="family toy has no prompt buckets"):
        toy.prompt_length(object())

    @dataclass
    class Prompted:
        lang_masks: Tensor

    obs = Prompted(torch.tensor([[True, True, False, False], [True, True, True, False]]))
    assert pi.prompt_length(obs) == 3
    assert pi.fill_prompt(obs, 2).lang_masks.tolist() == [[True, True, False, False]] * 2
    assert pi.fill_prompt(obs, 0).lang_masks[:, 0].all()  # an emptied prompt keeps its first slot
