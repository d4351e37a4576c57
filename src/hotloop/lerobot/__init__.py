"""LeRobot checkpoints' own pre/post-processing, read from the files `save_pretrained` writes.

A LeRobot policy never sees robot units: `policy_preprocessor.json` (rename -> add batch dim -> newline /
tokenize -> device -> normalise, in a per-policy order) turns a robot's raw observation into the model's
inputs, and `policy_postprocessor.json` (unnormalise -> device) turns the model's actions back into robot
units. The statistics live beside them in `policy_*_step_<i>_<name>.safetensors`. `processors.py` reads
both pipelines and applies them with LeRobot's torch operations in LeRobot's order (commit 7427f318), so
any LeRobot checkpoint (ACT, Diffusion, SmolVLA, pi0, pi0.5) can be served in robot units in and robot
units out. `steps.py` holds one small class per LeRobot step, `features.py` the feature / normalisation
vocabulary and arithmetic, `tokenizer.py` the saved Hugging Face fast tokenizer the tokenizer step calls. Anything hotloop cannot reproduce exactly (an
unknown step, mode, dtype or tokenizer layout; missing or mis-shaped statistics) is refused with a
`CheckpointError` naming the file, the step and the field.
"""
