"""How many denoising steps a Diffusion checkpoint needs: the action error of DDIM N (and of DDPM's own
strided N) against the checkpoint's default sampler (LeRobot: DDPM, num_inference_steps or all
num_train_timesteps), under the same starting noise.

DDPM is stochastic: two runs from the same x_T with other step noise differ by themselves, so the table
also gives that floor (the reference against itself with another step-noise draw). A DDIM N whose error
sits at the floor is as close to the reference as the reference is to itself. DDIM N is also compared with
DDIM at the most steps asked for (its own convergence, deterministic at LeRobot's eta 0).
"""

from __future__ import annotations

from typing import Any

import torch

from hotloop.compress.steps import action_agreement, check_steps


@torch.no_grad()
def step_sensitivity(
    model: Any, obs: Any, ladder: tuple[int, ...] = (100, 50, 20, 10, 5, 3, 1), seed: int = 0
) -> dict[str, Any]:
    """{"reference": {...}, "floor": agreement, "rows": [{"scheduler", "steps", "vs_reference",
    "vs_ddim_max"}, ...]} for every N of `ladder` (capped at num_train_timesteps) and both schedulers."""
    from hotloop.families.diffusion.compression import ddim_config, with_config
    from hotloop.families.diffusion.engines import DiffusionEngineShape
    from hotloop.families.diffusion.family import DiffusionFamily

    family = DiffusionFamily()
    cfg = model.cfg
    ladder = check_steps(tuple(n for n in ladder if n <= cfg.num_train_timesteps) or (1,))
    batch = family.batch_size(obs)
    ref_steps = cfg.num_inference_steps
    longest = max(ref_steps, *ladder)
    gen = torch.Generator().manual_seed(seed)
    noise = family.make_noise(cfg, DiffusionEngineShape(batch, longest), batch, gen)
    # The same x_T with another draw of the step noise: the reference's own spread.
    other = noise.clone()
    other[:, 1:] = family.make_noise(cfg, DiffusionEngineShape(batch, longest), batch, gen)[:, 1:]
    dim = cfg.action_dim
    ref = family.sample_actions(model, obs, noise, ref_steps)
    floor = action_agreement(ref, family.sample_actions(model, obs, other, ref_steps), dim)
    ddim = {n: with_config(model, ddim_config(cfg, n)) for n in ladder}
    top = max(ladder)
    ddim_top = family.sample_actions(ddim[top], obs, noise, top)
    rows = []
    for n in sorted(ladder, reverse=True):
        got = family.sample_actions(ddim[n], obs, noise, n)
        rows.append(
            {
                "scheduler": "DDIM",
                "steps": n,
                "vs_reference": action_agreement(ref, got, dim),
                "vs_ddim_max": action_agreement(ddim_top, got, dim),
            }
        )
        if cfg.noise_scheduler_type == "DDPM":
            strided = family.sample_actions(model, obs, noise, n)
            rows.append(
                {"scheduler": "DDPM", "steps": n, "vs_reference": action_agreement(ref, strided, dim)}
            )
    return {
        "reference": {"scheduler": cfg.noise_scheduler_type, "steps": ref_steps},
        "floor": floor,
        "rows": rows,
    }
