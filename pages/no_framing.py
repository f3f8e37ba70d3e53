"""Every response of the dashboard's server says it may not be framed (a websocket's
handshake answer too, a refused one included).

A page on another site that frames the dashboard is served under `localhost` (the Host check
passes) and can lure a click on Run. `X-Frame-Options: DENY` and the CSP `frame-ancestors
'none'` make the browser refuse to draw it in any frame. Streamlit's server has no option for
response headers, so the app is served as an `st.App` (app.py, main.py) with this ASGI
middleware wrapped around everything it answers: pages, static files, health, uploads, media.
"""

from __future__ import annotations

from typing import Any

FRAME_HEADERS = (
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", b"frame-ancestors 'none'"),
)


REFUSED_BODY = b"websocket refused\n"


class NoFraming:
    """ASGI middleware: the frame headers on every HTTP response (a CSP the response already
    has gets `frame-ancestors 'none'` added, never dropped), and on a websocket's handshake
    answer: its 101, and the 403 a refused one gets (Streamlit closes a cross-origin socket
    before accepting it, which the server would answer with a bare 403: it is sent here as a
    denial response carrying the headers, where the server offers that extension)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope.get("type") == "websocket":
            await self.app(scope, receive, _framed_handshake(scope, send))
            return
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return

        async def framed(message: dict) -> None:
            if message.get("type") == "http.response.start":
                message = {**message, "headers": with_frame_headers(message.get("headers", []))}
            await send(message)

        await self.app(scope, receive, framed)


def _framed_handshake(scope: dict, send: Any) -> Any:
    """`send` for a websocket: the handshake's answer carries the frame headers."""
    can_deny = "websocket.http.response" in (scope.get("extensions") or {})
    answered = False

    async def framed(message: dict) -> None:
        nonlocal answered
        kind = message.get("type")
        if not answered and kind in ("websocket.accept", "websocket.http.response.start"):
            answered = True
            message = {**message, "headers": with_frame_headers(message.get("headers", []))}
        elif not answered and kind == "websocket.close" and can_deny:
            answered = True  # refused before the handshake: a 403 with the headers
            headers = [(b"content-type", b"text/plain; charset=utf-8")]
            headers.append((b"content-length", str(len(REFUSED_BODY)).encode()))
            await send(
                {
                    "type": "websocket.http.response.start",
                    "status": 403,
                    "headers": with_frame_headers(headers),
                }
            )
            await send({"type": "websocket.http.response.body", "body": REFUSED_BODY})
            return
        await send(message)

    return framed


def with_frame_headers(headers) -> list[tuple[bytes, bytes]]:
    """`headers` (ASGI pairs) with X-Frame-Options DENY and frame-ancestors 'none'."""
    kept, policies = [], []
    for name, value in headers:
        low = bytes(name).lower()
        if low == b"x-frame-options":
            continue
        if low == b"content-security-policy":
            policies.append(bytes(value))
            continue
        kept.append((bytes(name), bytes(value)))
    kept.append(FRAME_HEADERS[0])
    policy = b"; ".join([*policies, FRAME_HEADERS[1][1]]) if policies else FRAME_HEADERS[1][1]
    kept.append((b"content-security-policy", policy))
    return kept


def middleware() -> list:
    """The middleware list for `st.App(..., middleware=...)`."""
    from starlette.middleware import Middleware

    return [Middleware(NoFraming)]
