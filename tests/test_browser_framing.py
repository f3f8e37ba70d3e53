"""The dashboard cannot be framed (issue 49), in real Chromium: a page on another origin that
frames it gets nothing drawn, and every response the server sends (the page, its scripts and
styles, health, the websocket's neighbours, a run's media) says `X-Frame-Options: DENY` and
`frame-ancestors 'none'`. A `?run=` link opens read-only until the user confirms.
"""

from __future__ import annotations

import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.helpers.browser import ARTIFACTS, RUN_TIMEOUT_MS, settle, settle_loaded

pytestmark = [pytest.mark.browser]

ATTACKER = "http://evil.example:9/attack.html"
"""A page on another origin (evil.example resolves to this machine: HOST_RULES); served by
the browser context's route, so no server is needed for it."""


def _frame_headers(headers) -> tuple[str, str]:
    get = {k.lower(): v for k, v in headers.items()}.get
    return get("x-frame-options", ""), get("content-security-policy", "")


def test_every_response_of_the_server_forbids_framing(app_url: str, chromium):
    for path in ("/", "/run", "/overview?run=/etc/passwd", "/_stcore/health", "/no-such"):
        try:
            with urllib.request.urlopen(app_url + path, timeout=30) as r:
                headers = dict(r.headers)
        except urllib.error.HTTPError as err:  # a 404 is a response too
            headers = dict(err.headers)
        xfo, csp = _frame_headers(headers)
        assert xfo == "DENY" and "frame-ancestors 'none'" in csp, (path, headers)
    context = chromium.new_context(viewport={"width": 1200, "height": 800})
    page = context.new_page()
    page.set_default_timeout(RUN_TIMEOUT_MS)
    seen: list[tuple[str, dict]] = []
    page.on("response", lambda r: seen.append((r.url, r.all_headers())))
    page.goto(f"{app_url}/?demo=cnn")  # a run: figures, media, every kind the app serves
    settle_loaded(page)
    page.get_by_text("PASS", exact=False).first.wait_for()
    settle(page)
    ours = [(url, h) for url, h in seen if url.startswith(app_url) and not url.startswith("ws")]
    assert len(ours) > 5, [u for u, _ in ours]
    bare = [url for url, h in ours if _frame_headers(h) != ("DENY", "frame-ancestors 'none'")]
    assert not bare, bare
    context.close()


def test_a_page_on_another_origin_that_frames_the_dashboard_gets_nothing_drawn(
    app_url: str, chromium, tmp_path: Path
):
    context = chromium.new_context(viewport={"width": 1200, "height": 800})
    target = f"{app_url}/?run={urllib.parse.quote(str(tmp_path / 'x.parity.npz'))}"
    html = f'<html><body><h1>win a prize</h1><iframe id="f" src="{target}" width="1000" ' \
        'height="700"></iframe></body></html>'  # fmt: skip
    context.route(
        ATTACKER, lambda route: route.fulfill(status=200, content_type="text/html", body=html)
    )
    page = context.new_page()
    page.goto(ATTACKER)
    page.get_by_text("win a prize").wait_for()
    page.wait_for_timeout(5000)  # time enough for the app to draw, were it allowed to
    frames = [f for f in page.frames if f != page.main_frame]
    assert frames, "the iframe is gone"
    for frame in frames:
        assert not frame.url.startswith(app_url), frame.url  # Chromium's error page instead
        assert frame.query_selector('[data-testid="stApp"]') is None
        assert "Run a validation" not in (frame.content() or "")
    page.screenshot(path=str(ARTIFACTS / "framing-refused.png"))
    context.close()


def _websocket_handshake(app_url: str, origin: str) -> str:
    """The answer's status line and headers to a websocket upgrade sent with `origin`."""
    import base64
    import os
    import socket

    host, port = app_url.removeprefix("http://").split(":")
    key = base64.b64encode(os.urandom(16)).decode()
    request = (
        f"GET /_stcore/stream HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        f"Origin: {origin}\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request.encode())
        answer = b""
        while b"\r\n\r\n" not in answer and (chunk := sock.recv(4096)):
            answer += chunk
    return answer.decode("latin-1").split("\r\n\r\n")[0]


def test_a_websocket_handshake_answer_forbids_framing_refused_or_accepted(app_url: str):
    """A cross-origin websocket is refused (403) with the frame headers on the refusal, as on
    every response; the same-origin one is switched (101) with them too."""
    for origin, status in (("http://evil.example", "403"), (app_url, "101")):
        head = _websocket_handshake(app_url, origin)
        lines = head.split("\r\n")
        assert lines[0].split()[1] == status, head
        headers = dict(line.split(": ", 1) for line in lines[1:])
        assert _frame_headers(headers) == ("DENY", "frame-ancestors 'none'"), head
