"""Training of the shipped demo policies. What every family's trainer shares lives once, one concept a
module; a family's trainer (`act_demo`, `diffusion_demo`, `smolvla_demo`, `conveyor`, `conveyor_vision`,
`detector_demo`) states only its options, the batch its loss needs and its checkpoint writer.

- `options`: the options and their checks (`TrainOptions`, `RecordedDemoOptions`, `CameraDemoOptions`).
- `data`: the dataset (recorded into the run when none is given), its views, layout, successful episodes
  and action chunks; `lerobot_frames` / `pi_arrays`: the arrays the LeRobot and pi families train on.
- `loop`: the optimisation loop; `run`: one run's folder, torch settings, clock and summary files.
- `demo_trainer` / `commands`: `hotloop train-demo`, the flags checked once for every family.

A new demo trainer: a config subclassing one of the options, a train function on `TrainingRun`, a
`TRAINER = DemoTrainer(...)` and its line in `commands._TRAINERS`.
"""
