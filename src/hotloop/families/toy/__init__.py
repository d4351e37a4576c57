"""The toy MLP family (`toy:mlp`): the smallest policy behind the family protocol, so that compile,
compress, the runtime, the closed loop and serve are tested on a second family beside pi."""
