"""A PushT checkpoint at LeRobot's own default size, made by LeRobot's code, for `lerobot_eval_ab.py`.

    .venv-lerobot/bin/python benchmarks/lerobot_pusht_checkpoint.py act OUT [--seed 0] [--n-action-steps 10]
    .venv-lerobot/bin/python benchmarks/lerobot_pusht_checkpoint.py diffusion OUT [--num-inference-steps 10]

Every size is LeRobot's default for the policy (ACT: dim_model 512, 4 encoder layers, chunk 100; Diffusion
Policy: down_dims 512/1024/2048, horizon 16, DDPM 100); only the features are PushT's (one 96x96 view, a 2-d
state and action) and the vision backbone is untrained (`pretrained_backbone_weights=None`: nothing is
downloaded). The weights are LeRobot's seeded initialisation and the normalisation statistics seeded, so the
checkpoint times and compares like a trained one but does not push the T. `--noise-scheduler DDIM
--num-inference-steps N` is the fastest Diffusion setting a LeRobot user can choose in its own config.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from lerobot.configs.types import FeatureType, PolicyFeature
from lerobot.policies.factory import get_policy_class, make_pre_post_processors

PUSHT_INPUTS = {
    "observation.image": PolicyFeature(FeatureType.VISUAL, (3, 96, 96)),
    "observation.state": PolicyFeature(FeatureType.STATE, (2,)),
}
PUSHT_ACTION = {"action": PolicyFeature(FeatureType.ACTION, (2,))}


def seeded_stats(gen: torch.Generator) -> dict[str, dict[str, torch.Tensor]]:
    """Mean / std / min / max per feature (per channel for the image), away from the identity."""
    stats = {}
    for key, ft in {**PUSHT_INPUTS, **PUSHT_ACTION}.items():
        visual = ft.type is FeatureType.VISUAL
        shape = (ft.shape[0], 1, 1) if visual else ft.shape
        mean = torch.rand(shape, generator=gen) * (0.5 if visual else 100.0)
        std = torch.rand(shape, generator=gen) * (0.3 if visual else 40.0) + 0.2
        stats[key] = {"mean": mean, "std": std, "min": mean - 2 * std, "max": mean + 2 * std}
    return stats


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("family", choices=["act", "diffusion"])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-inference-steps", type=int, default=None)
    parser.add_argument("--noise-scheduler", choices=["DDPM", "DDIM"], default="DDPM")
    parser.add_argument(
        "--n-action-steps",
        type=int,
        default=None,
        help="actions run per inference (LeRobot's default if not set)",
    )
    args = parser.parse_args()
    if args.out.exists() and any(args.out.iterdir()):
        parser.error(f"OUT {args.out} is not empty: name a new folder")
    common = {"input_features": PUSHT_INPUTS, "output_features": PUSHT_ACTION, "device": "cpu"}
    if args.family == "act":
        from lerobot.policies.act.configuration_act import ACTConfig

        steps = {} if args.n_action_steps is None else {"n_action_steps": args.n_action_steps}
        cfg = ACTConfig(**common, pretrained_backbone_weights=None, **steps)
    else:
        from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig

        cfg = DiffusionConfig(
            **common,
            pretrained_backbone_weights=None,
            noise_scheduler_type=args.noise_scheduler,
            num_inference_steps=args.num_inference_steps,
            **({} if args.n_action_steps is None else {"n_action_steps": args.n_action_steps}),
        )
    torch.manual_seed(args.seed)
    policy = get_policy_class(args.family)(cfg)
    pre, post = make_pre_post_processors(
        cfg, dataset_stats=seeded_stats(torch.Generator().manual_seed(args.seed))
    )
    args.out.mkdir(parents=True, exist_ok=True)
    policy.save_pretrained(args.out)
    pre.save_pretrained(args.out)
    post.save_pretrained(args.out)
    params = sum(p.numel() for p in policy.parameters())
    print(f"{args.family} at LeRobot's default size ({params / 1e6:.1f} M parameters) -> {args.out}")


if __name__ == "__main__":
    main()
