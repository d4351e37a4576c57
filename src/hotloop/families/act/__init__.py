"""LeRobot's ACT behind the family protocol: a ResNet backbone (every camera, one sub-engine) and the
transformer (one pass), LeRobot's processors for raw robot units in and out, checkpoint folders as targets."""
