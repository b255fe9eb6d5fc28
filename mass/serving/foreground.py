"""``mass serve``: a :class:`~mass.serving.server.TritonServer` in the foreground until
SIGINT/SIGTERM, announced as one JSON line (URLs, log, pid, access file)."""

from __future__ import annotations

import json
import signal
import threading

from mass.serving.server import TritonServer


def serve(repository: str, **server_args) -> int:
    """Start the server on ``repository`` (``server_args`` go to :class:`TritonServer`), print
    its JSON line, wait for SIGINT/SIGTERM; 1 if the server exits on its own, else 0."""
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with TritonServer(repository, **server_args) as server:
            proc = server.process
            assert proc is not None  # start() succeeded
            print(
                json.dumps(
                    {
                        "grpc_url": server.grpc_url,
                        "http_url": server.http_url,
                        "metrics_url": server.metrics_url,
                        "log": str(server.log_path),
                        "pid": proc.pid,
                        "access_file": str(server.write_access_file()),
                    }
                ),
                flush=True,
            )
            while not stop.wait(1.0):
                if proc.poll() is not None:
                    print(f"tritonserver exited unexpectedly; log tail:\n{server.log_tail()}")
                    return 1
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
