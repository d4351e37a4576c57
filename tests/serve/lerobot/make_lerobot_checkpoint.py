"""Write a small ACT checkpoint with LeRobot's own code (run by .venv-lerobot's python).

    python make_lerobot_checkpoint.py OUT_DIR [--chunk 20] [--state 6] [--camera front:96x128]

A stock `ACTPolicy` (torchvision's ResNet-18 backbone at its real width, untrained: seeded weights; a small
transformer) saved with `save_pretrained`, and its pre/post-processors with fixed dataset statistics:
exactly what LeRobot's own `policy_server` loads from a `pretrained_name_or_path`, so both servers can be
pointed at one folder. No download: the backbone starts from random weights.
"""

from __future__ import annotations

import argparse

import torch
from lerobot.configs.types import FeatureType, PolicyFeature
from lerobot.policies.act.configuration_act import ACTConfig
from lerobot.policies.act.modeling_act import ACTPolicy
from lerobot.policies.factory import make_pre_post_processors


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--chunk", type=int, default=20)
    parser.add_argument("--state", type=int, default=6)
    parser.add_argument("--camera", default="front:96x128")
    args = parser.parse_args()
    name, size = args.camera.split(":")
    h, w = (int(v) for v in size.split("x"))
    torch.manual_seed(0)
    image_key = f"observation.images.{name}"
    cfg = ACTConfig(
        input_features={
            "observation.state": PolicyFeature(FeatureType.STATE, (args.state,)),
            image_key: PolicyFeature(FeatureType.VISUAL, (3, h, w)),
        },
        output_features={"action": PolicyFeature(FeatureType.ACTION, (args.state,))},
        chunk_size=args.chunk,
        n_action_steps=args.chunk,
        dim_model=128,
        n_heads=4,
        dim_feedforward=512,
        n_encoder_layers=2,
        n_decoder_layers=1,
        n_vae_encoder_layers=1,
        pretrained_backbone_weights=None,
        device="cpu",
    )
    policy = ACTPolicy(cfg)
    policy.eval()
    policy.save_pretrained(args.out)
    d = args.state
    stats = {
        "observation.state": {"mean": torch.linspace(-0.5, 0.5, d), "std": torch.full((d,), 0.8)},
        image_key: {"mean": torch.full((3, 1, 1), 0.45), "std": torch.full((3, 1, 1), 0.25)},
        "action": {"mean": torch.linspace(0.2, -0.2, d), "std": torch.full((d,), 1.5)},
    }
    pre, post = make_pre_post_processors(cfg, dataset_stats=stats)
    pre.save_pretrained(args.out)
    post.save_pretrained(args.out)


if __name__ == "__main__":
    main()
