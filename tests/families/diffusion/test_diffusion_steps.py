"""The sensitivity to N of the step reduction, measured on a trained checkpoint (the synthetic one of
`diffusion_checkpoints.train_checkpoint`: one chunk per observation, so the truth is known)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from diffusion_checkpoints import synthetic_chunks

from hotloop.families import get_family
from hotloop.families.diffusion.compression import ddim_config, with_config
from hotloop.families.diffusion.engines import DiffusionEngineShape, DiffusionObservation
from hotloop.families.diffusion.steps import step_sensitivity
from hotloop.targets import TargetOptions, find_target


def test_the_sensitivity_table_covers_both_samplers_and_ddim_converges(trained_ckpt: Path) -> None:
    source = find_target(str(trained_ckpt)).build_source(str(trained_ckpt), TargetOptions())
    obs = source.family.random_observation(source.cfg, DiffusionEngineShape(8, 50), 0)
    report = step_sensitivity(source.model, obs, ladder=(50, 20, 10, 5, 1))
    assert report["reference"] == {"scheduler": "DDPM", "steps": 50}
    rows = {(r["scheduler"], r["steps"]): r for r in report["rows"]}
    assert set(rows) == {(s, n) for s in ("DDPM", "DDIM") for n in (50, 20, 10, 5, 1)}
    assert rows["DDPM", 50]["vs_reference"]["max_abs"] == 0.0  # the reference itself
    assert report["floor"]["max_abs"] > 0  # DDPM against itself under other step noise
    assert rows["DDIM", 50]["vs_ddim_max"]["max_abs"] == 0.0
    # DDIM converges in N: one step is far from its 50-step answer, 10 and 20 steps close to it
    far = rows["DDIM", 1]["vs_ddim_max"]["max_norm_error"]
    assert rows["DDIM", 20]["vs_ddim_max"]["max_norm_error"] < far / 2
    assert rows["DDIM", 10]["vs_ddim_max"]["cosine"] > rows["DDIM", 1]["vs_ddim_max"]["cosine"]


def test_ddim_in_ten_steps_lands_near_the_truth_like_ddpm_in_fifty(trained_ckpt: Path) -> None:
    """In robot units against the chunk the data calls for: DDIM 10 within 2x DDPM 50's mean error (the
    reference's own), DDIM 1 far worse."""
    policy = find_target(str(trained_ckpt)).build_policy(str(trained_ckpt), TargetOptions())
    family, cfg = get_family("diffusion"), policy.config
    rng = np.random.default_rng(5)
    b = 16
    state, env = rng.uniform(-1, 1, (b, 4)).astype(np.float32), rng.uniform(-1, 1, (b, 2)).astype(np.float32)
    frames = [policy.frame({"state": state[i], "environment_state": env[i]}) for i in range(b)]
    two = [torch.cat([f[k] for f in frames])[:, None].expand(-1, 2, -1).contiguous() for k in
           ("observation.state", "observation.environment_state")]  # fmt: skip
    obs = DiffusionObservation(two[0], None, two[1])
    noise = family.make_noise(cfg, DiffusionEngineShape(b, 50), b, torch.Generator().manual_seed(0))
    truth = synthetic_chunks(state, env, cfg.horizon)

    def error(model: object, n: int) -> float:
        raw = policy.post.action(family.sample_actions(model, obs, noise, n)).numpy()
        return float(np.abs(raw - truth).mean())

    ddpm50 = error(policy.model, 50)
    ddim10 = error(with_config(policy.model, ddim_config(cfg, 10)), 10)
    ddim1 = error(with_config(policy.model, ddim_config(cfg, 1)), 1)
    assert ddpm50 < 0.2 and ddim10 < 2 * ddpm50 and ddim1 > 2 * ddim10, (ddpm50, ddim10, ddim1)
