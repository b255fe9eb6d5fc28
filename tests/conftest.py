"""Shared fixtures: a real Triton server factory (session-scoped, torn down at the end)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")


@pytest.fixture(scope="session")
def triton_server_factory():
    """``start(repository, **kwargs) -> TritonServer``: a started real tritonserver.

    Servers bind free 127.0.0.1 ports and are stopped (stubs and shm included) when the test
    session ends; call ``server.stop()`` earlier to free the cores. Each start costs seconds
    (the python stubs import torch), so share one server per module or session where possible.
    Keyword arguments go to :class:`mass.serving.TritonServer` (e.g. ``model_control="explicit"``).
    """
    from mass.serving import TritonServer

    servers: list[TritonServer] = []

    def start(repository, **kwargs) -> TritonServer:
        server = TritonServer(repository, **kwargs)
        servers.append(server)
        return server.start()

    try:
        yield start
    finally:
        for server in servers:
            server.stop()
