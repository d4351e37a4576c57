"""LeRobot's `transport.AsyncInference` messages on the wire, and its chunked byte transfer.

The messages are tiny (lerobot/transport/services.proto): `Observation {TransferState transfer_state = 1;
bytes data = 2;}`, `Actions {bytes data = 1;}`, `PolicySetup {bytes data = 1;}`, `Empty {}`. They are
encoded here by hand (protobuf's wire format: a varint tag per field, wire type 0 for the enum, 2 for
bytes), so the server needs neither generated stubs nor the protobuf runtime. Unknown fields are skipped
as protobuf's own parsers skip them; malformed bytes raise `WireError`.

A payload bigger than one gRPC message travels as a client stream of `Observation` messages of at most
2 MiB (`lerobot.transport.utils.send_bytes_in_chunks`): BEGIN, MIDDLE..., END, or a lone END for a small
one. `ChunkAssembler` reassembles it as LeRobot's `receive_bytes_in_chunks` does (BEGIN restarts the
buffer, MIDDLE appends, END completes; TRANSFER_UNKNOWN is an error) and stops at its size limit before
buffering more.
"""

from __future__ import annotations

from dataclasses import dataclass

SERVICE = "transport.AsyncInference"
CHUNK_BYTES = 2 * 2**20  # LeRobot's CHUNK_SIZE
# The largest single gRPC message the server accepts: one 2 MiB chunk and its framing (LeRobot's own
# channel allows 4 MiB).
MAX_GRPC_MESSAGE_BYTES = 4 * 2**20

TRANSFER_UNKNOWN, TRANSFER_BEGIN, TRANSFER_MIDDLE, TRANSFER_END = 0, 1, 2, 3
TRANSFER_NAMES = {0: "TRANSFER_UNKNOWN", 1: "TRANSFER_BEGIN", 2: "TRANSFER_MIDDLE", 3: "TRANSFER_END"}


class WireError(ValueError):
    """Bytes that are not the message they claim to be; the text goes back to the client."""


class TooLarge(WireError):
    """A chunked payload grew past the server's limit; it was not buffered further."""


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise WireError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise WireError("varint longer than 10 bytes")


def _fields(data: bytes) -> dict[int, int | bytes]:
    """field number -> value of the last occurrence (protobuf's rule for a singular field)."""
    out: dict[int, int | bytes] = {}
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise WireError("field number 0")
        if wire_type == 0:
            out[number], pos = _read_varint(data, pos)
        elif wire_type == 2:
            length, pos = _read_varint(data, pos)
            if pos + length > len(data):
                raise WireError("a length-delimited field runs past the message")
            out[number] = data[pos : pos + length]
            pos += length
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        else:
            raise WireError(f"wire type {wire_type} is not one LeRobot's messages use")
        if pos > len(data):
            raise WireError("a fixed-width field runs past the message")
    return out


def _bytes_field(fields: dict[int, int | bytes], number: int) -> bytes:
    value = fields.get(number, b"")
    if not isinstance(value, bytes):
        raise WireError(f"field {number} should hold bytes")
    return value


def encode_bytes_message(data: bytes) -> bytes:
    """`Actions` / `PolicySetup` (field 1: bytes); an empty payload is the empty message, which is also
    what `Empty` encodes to (the stock client reads an empty `Actions` as "nothing yet")."""
    return b"\x0a" + _varint(len(data)) + data if data else b""


def decode_bytes_message(raw: bytes) -> bytes:
    return _bytes_field(_fields(raw), 1)


def decode_empty(raw: bytes) -> None:
    _fields(raw)  # any fields are unknown ones, skipped; malformed bytes are still an error


def encode_empty(_: object = None) -> bytes:
    return b""


@dataclass(frozen=True)
class Chunk:
    """One `Observation` message: a transfer state and up to 2 MiB of the payload."""

    transfer_state: int
    data: bytes


def decode_chunk(raw: bytes) -> Chunk:
    fields = _fields(raw)
    state = fields.get(1, TRANSFER_UNKNOWN)
    if not isinstance(state, int):
        raise WireError("transfer_state should be an enum")
    return Chunk(state, _bytes_field(fields, 2))


def encode_chunk(chunk: Chunk) -> bytes:
    """The client side (tests): what `send_bytes_in_chunks` puts on the wire."""
    out = b""
    if chunk.transfer_state:
        out += b"\x08" + _varint(chunk.transfer_state)
    if chunk.data:
        out += b"\x12" + _varint(len(chunk.data)) + chunk.data
    return out


def split_payload(payload: bytes, chunk_bytes: int = CHUNK_BYTES) -> list[Chunk]:
    """`payload` as the stock client streams it (`send_bytes_in_chunks`' states, for tests)."""
    chunks = []
    sent = 0
    while sent < len(payload):
        if sent + chunk_bytes >= len(payload):
            state = TRANSFER_END
        elif sent == 0:
            state = TRANSFER_BEGIN
        else:
            state = TRANSFER_MIDDLE
        chunks.append(Chunk(state, payload[sent : sent + chunk_bytes]))
        sent += chunk_bytes
    return chunks


class ChunkAssembler:
    """Reassemble one chunked payload; `add` returns the payload at TRANSFER_END, else None."""

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self._parts: list[bytes] = []
        self._size = 0

    def add(self, chunk: Chunk) -> bytes | None:
        state = chunk.transfer_state
        if state == TRANSFER_BEGIN:
            self._parts, self._size = [], 0
        elif state not in (TRANSFER_MIDDLE, TRANSFER_END):
            raise WireError(
                f"transfer_state {TRANSFER_NAMES.get(state, state)}: send TRANSFER_BEGIN, _MIDDLE or _END "
                "(lerobot.transport.utils.send_bytes_in_chunks)"
            )
        self._size += len(chunk.data)
        if self._size > self.limit_bytes:
            self._parts = []
            raise TooLarge(
                f"the observation passed {self.limit_bytes / 2**20:g} MiB (the server's --max-message-mb); "
                "send smaller images (lower the cameras' resolution) or raise the server's limit"
            )
        self._parts.append(chunk.data)
        if state != TRANSFER_END:
            return None
        payload = b"".join(self._parts)
        self._parts, self._size = [], 0
        return payload
