"""How much memory idle clients can make `hotloop serve` hold (docs/serving.md, "Limits").

Starts `hotloop serve toy:mlp` in its own process, then opens `--clients` raw websocket connections; each
sends one frame header announcing the largest message the server reads (`--max-message-mb`, times
`--announce-factor`) and all of its payload but the last byte, then waits. Prints the server's resident
memory before and 3 s after, and how many connections were admitted (`--max-connections`).

    PYTHONPATH=src python benchmarks/serve_memory.py --clients 20
    PYTHONPATH=src python benchmarks/serve_memory.py --clients 20 --announce-factor 4  # refused at once
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc (Linux only)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--max-message-mb", type=float, default=16.0)
    parser.add_argument(
        "--announce-factor",
        type=float,
        default=1.0,
        help="announce this many times the limit (4: the old cap)",
    )
    args = parser.parse_args()
    port = _free_port()
    cmd = [sys.executable, "-m", "hotloop", "serve", "toy:mlp", "--port", str(port)]
    cmd += ["--max-message-mb", str(args.max_message_mb)]
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(SRC))}  # another checkout's, if set
    server = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    held: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("the server did not come up") from None
                time.sleep(0.3)
        before = _rss_mib(server.pid)
        handshake = (
            f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
        announce = int(args.max_message_mb * 2**20 * args.announce_factor)
        header = bytes([0x82, 0x80 | 127]) + struct.pack("!Q", announce) + b"\0\0\0\0"
        for _ in range(args.clients):
            conn = socket.create_connection(("127.0.0.1", port), timeout=30)
            conn.sendall(handshake)
            if b" 101 " not in conn.recv(4096).split(b"\r\n", 1)[0]:
                conn.close()  # refused: over --max-connections
                continue
            held.append(conn)
            with contextlib.suppress(OSError):  # the server closed it (code 1009): over its limit
                conn.sendall(header + bytes(announce - 1))
        time.sleep(3)
        after = _rss_mib(server.pid)
        print(
            f"{len(held)}/{args.clients} connections admitted, frames of {announce / 2**20:.0f} MiB held "
            f"back by one byte: server RSS {before:.0f} MiB -> {after:.0f} MiB"
        )
    finally:
        for conn in held:
            conn.close()
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
