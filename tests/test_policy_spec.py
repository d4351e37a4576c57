import pytest

from hotloop.errors import ConfigError
from hotloop.policy_spec import ImageSpec, PolicySpec


def test_a_spec_survives_its_json_form():
    spec = PolicySpec(
        images=(ImageSpec("top", 64, 48), ImageSpec("*", 56, 56)),
        min_views=1,
        images_as="array",
        state_dim=10,
        action_dim=4,
        action_meaning="ee_delta",
        horizon=8,
        prompt=True,
    )
    assert PolicySpec.from_dict(spec.to_dict()) == spec


@pytest.mark.parametrize(
    "data",
    [[], None, {"images": []}, {"action_dim": "four"}, {"action_dim": 4, "images": [{"key": "top"}]}],
)
def test_a_malformed_stored_spec_is_a_config_error(data):
    with pytest.raises(ConfigError, match="policy spec"):
        PolicySpec.from_dict(data)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"action_dim": 0}, "action_dim"),
        ({"action_dim": 4, "min_views": 1}, "min_views"),
        ({"action_dim": 4, "action_meaning": "velocity"}, "velocity"),
        ({"action_dim": 4, "state_dim": -1}, "state_dim"),
    ],
)
def test_impossible_specs_are_rejected(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        PolicySpec(**kwargs)
