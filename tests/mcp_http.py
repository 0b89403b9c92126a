"""An MCP server served over streamable HTTP on a free local port, and a client that presents a key to it
(tests/test_mcp.py, tests/test_mcp_code_tools.py). Import after ``pytest.importorskip("mcp")``."""
from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from mcp import Client


@contextmanager
def serve_http(server) -> Iterator[str]:
    """Serves `server` (repoctx.mcp.build_server) with uvicorn on 127.0.0.1 and yields its /mcp URL; stops it on
    leaving. Closing the server's repositories is the caller's."""
    import uvicorn

    from repoctx.mcp import http_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    uv = uvicorn.Server(uvicorn.Config(http_app(server), host="127.0.0.1", port=port, log_level="warning"))
    th = threading.Thread(target=uv.run, daemon=True)
    th.start()
    deadline = time.monotonic() + 20
    while not uv.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/mcp"
    uv.should_exit = True
    th.join(10)


def http_client(url: str, key: str) -> Client:
    """An MCP client of `url` that sends `key` as its bearer token."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    hc = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60)
    return Client(streamable_http_client(url, http_client=hc))
