"""The robot-side client of `hotloop serve`: numpy + websockets + msgpack, no torch.

`PolicyClient` speaks openpi's websocket protocol and has the Policy shape (`infer(obs)`, `reset()`), so a
chunk scheduler drives a remote policy exactly as it drives a local one.
"""

from hotloop.client.codec import WireError
from hotloop.client.websocket_client import PolicyClient, ServerError

__all__ = ["PolicyClient", "ServerError", "WireError"]
