"""Small seeded checkpoints made by LeRobot's own code (run in .venv-lerobot): ACT, Diffusion Policy, SmolVLA.

    python make_checkpoints.py OUT act diffusion smolvla     -> OUT/<family>/ as LeRobot saves a policy

Each folder is what LeRobot's `save_pretrained` writes for the policy and its `make_pre_post_processors`
pipelines (seeded, non-trivial normalisation statistics), nothing edited after. ACT and Diffusion Policy see
PushT's observations (one 96x96 view `observation.image`, a 2-d `observation.state`, a 2-d action), so
`lerobot-eval --env.type=pusht` runs them; their ResNet is LeRobot's stock one, untrained
(`pretrained_backbone_weights=None`: nothing is downloaded). SmolVLA's VLM is a tiny SmolVLM saved in
`OUT/smolvla/vlm/` by transformers (config, image processor and a word-level tokenizer, `local_vlm.py`), named
by its absolute path in `vlm_model_name`, which is how LeRobot 0.4 reads a VLM without the Hub.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from lerobot.configs.types import FeatureType, PolicyFeature
from lerobot.policies.factory import get_policy_class, make_pre_post_processors

PUSHT_INPUTS = {
    "observation.image": PolicyFeature(FeatureType.VISUAL, (3, 96, 96)),
    "observation.state": PolicyFeature(FeatureType.STATE, (2,)),
}
PUSHT_ACTION = {"action": PolicyFeature(FeatureType.ACTION, (2,))}


def _stats(features: dict[str, PolicyFeature], gen: torch.Generator) -> dict[str, dict[str, torch.Tensor]]:
    """Mean / std / min / max per feature (per channel for images), seeded and away from the identity."""
    stats = {}
    for key, ft in features.items():
        shape = (ft.shape[0], 1, 1) if ft.type is FeatureType.VISUAL else ft.shape
        mean = torch.rand(shape, generator=gen) * (0.5 if ft.type is FeatureType.VISUAL else 100.0)
        std = torch.rand(shape, generator=gen) * (0.3 if ft.type is FeatureType.VISUAL else 40.0) + 0.2
        stats[key] = {"mean": mean, "std": std, "min": mean - 2 * std, "max": mean + 2 * std}
    return stats


def act_config() -> Any:
    from lerobot.policies.act.configuration_act import ACTConfig

    return ACTConfig(
        input_features=PUSHT_INPUTS, output_features=PUSHT_ACTION, chunk_size=10, n_action_steps=5,
        dim_model=64, n_heads=4, dim_feedforward=128, n_encoder_layers=1, n_decoder_layers=1,
        n_vae_encoder_layers=1, latent_dim=8, pretrained_backbone_weights=None, device="cpu",
    )  # fmt: skip


def diffusion_config() -> Any:
    from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig

    return DiffusionConfig(
        input_features=PUSHT_INPUTS, output_features=PUSHT_ACTION, n_obs_steps=2, horizon=8, n_action_steps=6,
        crop_shape=(84, 84), pretrained_backbone_weights=None, down_dims=(32, 64), kernel_size=3, n_groups=8,
        diffusion_step_embed_dim=32, spatial_softmax_num_keypoints=16, num_train_timesteps=10, device="cpu",
    )  # fmt: skip


def smolvla_config(folder: Path) -> Any:
    from lerobot.policies.smolvla.configuration_smolvla import SmolVLAConfig
    from local_vlm import write_local_vlm

    vlm = write_local_vlm(folder / "vlm")
    inputs = {
        "observation.images.top": PolicyFeature(FeatureType.VISUAL, (3, 40, 52)),
        "observation.state": PolicyFeature(FeatureType.STATE, (6,)),
    }
    return SmolVLAConfig(
        input_features=inputs, output_features={"action": PolicyFeature(FeatureType.ACTION, (6,))},
        chunk_size=10, n_action_steps=5, max_state_dim=12, max_action_dim=12, resize_imgs_with_padding=(48, 48),
        tokenizer_max_length=16, num_steps=4, vlm_model_name=str(vlm.resolve()), load_vlm_weights=False,
        num_vlm_layers=4, device="cpu",
    )  # fmt: skip


def make(family: str, out: Path, seed: int) -> Path:
    folder = out / family
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    config = {"act": act_config, "diffusion": diffusion_config}.get(family)
    cfg = config() if config is not None else smolvla_config(folder)
    policy = get_policy_class(family)(cfg)
    gen = torch.Generator().manual_seed(seed)
    features = {**cfg.input_features, **cfg.output_features}
    pre, post = make_pre_post_processors(cfg, dataset_stats=_stats(features, gen))
    policy.save_pretrained(folder)
    pre.save_pretrained(folder)
    post.save_pretrained(folder)
    if family == "smolvla":
        # hotloop reads a VLM's config from vlm_config.json beside config.json (docs/smolvla.md): the local
        # VLM's own config.json and the ids of its image tokens.
        from local_vlm import vlm_config_for_hotloop

        (folder / "vlm_config.json").write_text(json.dumps(vlm_config_for_hotloop(folder / "vlm"), indent=2))
    return folder


def main() -> None:
    out = Path(sys.argv[1])
    made = {family: str(make(family, out, seed)) for seed, family in enumerate(sys.argv[2:])}
    print(json.dumps(made))


if __name__ == "__main__":
    main()
