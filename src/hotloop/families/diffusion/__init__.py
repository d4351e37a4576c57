"""LeRobot's Diffusion Policy behind the family protocol (`hotloop.families.protocol`): the observation
encoder and the denoising loop as sub-engines, the policy wrapper that keeps the n_obs_steps history, a
LeRobot checkpoint folder as a target, and the DDPM -> DDIM step reduction."""
