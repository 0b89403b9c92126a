"""What a hostile or careless HTTP client meets before an endpoint runs: two pure ASGI middlewares and the one
error shape every refusal of the service uses.

* ``BodyLimit``: a request body may have at most ``REPOCTX_MAX_BODY`` bytes (413, refused on its
  ``Content-Length`` before a byte is read, and counted on the bytes as they stream in) and must arrive within
  ``REPOCTX_BODY_TIMEOUT`` seconds of the request reaching the app (408). A client that sends its body a byte at a
  time no longer holds a request (and a worker thread waiting on it) for as long as it likes. Once the body is
  complete the deadline no longer applies (a stream's wait for a disconnect is not a body).
* ``RateLimit``: at most ``REPOCTX_RATE_LIMIT`` requests (the ``limits`` notation: ``"300/minute"``,
  ``"10/second;300/minute"``; ``""`` turns it off) per API key, or per client address for requests without a key
  (``/health``, a public ``/metrics``), in a moving window; past it, 429 with ``Retry-After``. The counts live in
  this process's memory: with ``serve --workers N`` (or N servers behind a balancer) a key may make up to N times
  the limit, and a restart forgets them. It sits after authentication (it needs the key), so requests refused for
  a bad key (401) are not counted.

Both answer with ``error_body(error, detail)``: ``{"error": <a stable code>, "detail": <one line for a person>}``,
the shape of every error of the service."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

from repoctx.config import ConfigError

__all__ = ["error_body", "error_response", "parse_rate_limit", "BodyLimit", "RateLimit"]


def error_body(error: str, detail: str, **extra: Any) -> dict:
    """The body of every error answer: a code a program can branch on and a line a person can read. A few
    answers add structured extras after these two (a validation error lists its ``fields``)."""
    return {"error": error, "detail": detail, **extra}


def error_response(status: int, error: str, detail: str, headers: dict[str, str] | None = None):
    from starlette.responses import JSONResponse

    return JSONResponse(error_body(error, detail), status_code=status, headers=headers)


def parse_rate_limit(text: str, variable: str = "REPOCTX_RATE_LIMIT") -> list:
    """``"10/second;300/minute"`` as ``limits`` items; ``""`` is no limit. A ConfigError naming the variable
    when the text does not parse (checked when the service starts, not at the first request)."""
    from limits import parse_many

    text = (text or "").strip()
    if not text:
        return []
    try:
        items = parse_many(text)
    except ValueError:
        raise ConfigError(
            f"{variable} must be a rate in the `limits` notation, like '300/minute' or "
            f"'10/second;300/minute' ('' turns the limit off), got {text!r}"
        ) from None
    if any(item.amount < 1 for item in items):
        raise ConfigError(f"{variable} must allow at least one request per window, got {text!r}")
    return items


def _header(scope, name: bytes) -> str | None:
    for k, v in scope.get("headers") or []:
        if k == name:
            return v.decode("latin-1")
    return None


class BodyLimit:
    """413 past ``max_body`` bytes, 408 when the body is not all there ``timeout`` seconds after the request
    reached this middleware (see the module docstring). The refusal is sent from here, so it looks the same
    whatever the endpoint does with the disconnect it is handed instead of the rest of the body."""

    def __init__(self, app, max_body: int, timeout: float):
        self.app = app
        self.max_body = int(max_body)
        self.timeout = float(timeout)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = _header(scope, b"content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > self.max_body:
            return await self._refuse_413(scope, receive, send)

        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        state = {"body_done": False, "refused": False, "started": False, "received": 0}

        async def guarded_send(message) -> None:
            if state["refused"]:  # the client was answered here already; the app's late answer goes nowhere
                return
            if message["type"] == "http.response.start":
                state["started"] = True
            await send(message)

        async def refuse(response) -> dict:
            state["body_done"] = True
            if not state["started"]:
                state["started"] = True
                await response(scope, receive, send)
            state["refused"] = True
            return {"type": "http.disconnect"}

        async def guarded_receive() -> dict:
            if state["refused"]:
                return {"type": "http.disconnect"}
            if state["body_done"]:
                return await receive()
            try:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise TimeoutError
                message = await asyncio.wait_for(receive(), remaining)
            except TimeoutError:
                return await refuse(
                    error_response(
                        408,
                        "request_timeout",
                        f"the request body did not arrive within {self.timeout:g} s (REPOCTX_BODY_TIMEOUT)",
                        {"Connection": "close"},
                    )
                )
            if message["type"] == "http.request":
                state["received"] += len(message.get("body", b""))
                if state["received"] > self.max_body:
                    return await refuse(self._too_large())
                if not message.get("more_body", False):
                    state["body_done"] = True
            else:  # http.disconnect: nothing more will come
                state["body_done"] = True
            return message

        await self.app(scope, guarded_receive, guarded_send)

    def _too_large(self):
        return error_response(
            413,
            "body_too_large",
            f"the request body is larger than {self.max_body} bytes (REPOCTX_MAX_BODY)",
            {"Connection": "close"},
        )

    async def _refuse_413(self, scope, receive, send) -> None:
        await self._too_large()(scope, receive, send)


class RateLimit:
    """A moving-window limit per API key (per client address without one), in this process's memory; past it
    429 with ``Retry-After``. Place it after authentication: it reads the principal the auth step stored in
    ``scope["state"]``."""

    def __init__(self, app, limit: str):
        from limits import storage, strategies

        self.app = app
        self.text = (limit or "").strip()
        self.items = parse_rate_limit(self.text)
        self.limiter = strategies.MovingWindowRateLimiter(storage.MemoryStorage()) if self.items else None

    @staticmethod
    def identity(scope) -> str:
        principal = (scope.get("state") or {}).get("principal")
        if principal is not None:
            key_id = getattr(principal, "key_id", "") or ""
            return f"key:{key_id}" if key_id else f"principal:{principal.name}"
        client = scope.get("client")
        return f"addr:{client[0] if client else 'unknown'}"

    def check(self, who: str) -> tuple[int, Any] | None:
        """Count one request of ``who``; None when it may go on, else (seconds until it may try again, the limit
        it reached). No await between the test and the hit: on one event loop the two are one step."""
        limiter = self.limiter
        if limiter is None:  # no limits configured
            return None
        for item in self.items:
            if not limiter.test(item, who):
                reset = limiter.get_window_stats(item, who).reset_time
                return max(1, math.ceil(reset - time.time())), item
        for item in self.items:
            limiter.hit(item, who)
        return None

    @staticmethod
    def describe(item) -> str:
        unit = item.GRANULARITY.name
        return f"{item.amount} per {unit}" if item.multiples == 1 else f"{item.amount} per {item.multiples} {unit}s"

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or self.limiter is None:
            return await self.app(scope, receive, send)
        refused = self.check(self.identity(scope))
        if refused is not None:
            retry, item = refused
            who = "this key" if (scope.get("state") or {}).get("principal") is not None else "this address"
            response = error_response(
                429,
                "rate_limited",
                f"more than {self.describe(item)} requests from {who} (REPOCTX_RATE_LIMIT): try again in {retry} s",
                {"Retry-After": str(retry)},
            )
            return await response(scope, receive, send)
        await self.app(scope, receive, send)
