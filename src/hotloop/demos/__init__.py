"""The shipped demo policies (`demo:conveyor`, `demo:conveyor-vision`...): their policy wrappers, compile
sources, dataset adapters and task observations."""
