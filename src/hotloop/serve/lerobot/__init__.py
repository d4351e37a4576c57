"""`hotloop serve TARGET --protocol lerobot`: LeRobot's async-inference gRPC wire, spoken safely.

LeRobot's stock `robot_client` (`lerobot.async_inference.robot_client`, wire stable since 0.4.4) talks to a
`policy_server` over gRPC service `transport.AsyncInference`: `Ready`, `SendPolicyInstructions`,
client-streaming `SendObservations` and `GetActions`, whose payloads are pickles. Here that wire is served
by hotloop's own policy (a checkpoint, a compiled artifact, a demo) without LeRobot installed:

- `wire`: the four messages, hand-encoded (a byte field and an enum), and the 2 MiB chunk reassembly;
- `unpickle`, `standins`, `numpy_standins`: the allow-list unpickler that never runs what a client names;
- `reply`: the pickled `list[TimedAction]` the stock client loads;
- `features`, `instructions`: a client's robot keys mapped onto the served policy's observation, checked;
- `execution`: one client's timesteps, admission, chunk history and the rtc-soft inputs;
- `servicer`, `metrics`, `server`: the gRPC handlers, their Prometheus counters, the process.
"""
