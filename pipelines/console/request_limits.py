"""A bound on what one request may send: its body (the rule and backtest forms are a few hundred bytes).

Pure ASGI middleware, so that it sits in the app's middleware list beside whatever comes later (sign-in, CSRF): a
declared ``Content-Length`` over the bound is answered 413 before anything reads the body; a body sent without a
length (chunked) is counted as it arrives and ``BodyTooLarge`` (413, app.py) ends the request at the bound.

Example::

    app = FastAPI(middleware=[Middleware(BodyLimit, max_bytes=64 * 1024)])
"""

from __future__ import annotations

from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_BODY_BYTES = 64 * 1024


class BodyTooLarge(ValueError):
    """A request body over the console's bound."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"This request's body is larger than the {limit} bytes the console accepts.")
        self.limit = limit


class BodyLimit:
    """Refuses request bodies over ``max_bytes`` with 413."""

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            response = PlainTextResponse(str(BodyTooLarge(self.max_bytes)), status_code=413)
            await response(scope, receive, send)
            return
        received = 0

        async def bounded() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        await self.app(scope, bounded, send)
