"""The Host check's rule (the browser test drives it through a real rebinding name)."""

from __future__ import annotations

import pytest

from parity.dashboard.access import allowed_hosts, host_allowed, host_name


@pytest.mark.parametrize(
    ("host", "name"),
    [
        ("localhost:8501", "localhost"),
        ("LocalHost", "localhost"),
        ("127.0.0.1:80", "127.0.0.1"),
        ("[::1]:8501", "::1"),
        ("[::1]", "::1"),
        ("evil.example:8501", "evil.example"),
        ("localhost:", None),
        ("localhost:85x", None),
        ("[::1]junk", None),
        ("a b", None),
        ("", None),
        ("localhost.evil.example", "localhost.evil.example"),
    ],
)
def test_host_name(host, name):
    assert host_name(host) == name


def test_only_localhost_names_unless_configured():
    local = allowed_hosts("")
    for host in ("localhost:8501", "127.0.0.1:8501", "[::1]:8501"):
        assert host_allowed(host, local)
    for host in ("evil.example:8501", "localhost.:8501", "127.0.0.2:8501", "0.0.0.0:8501", None):
        assert not host_allowed(host, local)
    configured = allowed_hosts(" Box.Lan, ,[fe80::1]")
    assert host_allowed("box.lan:8501", configured) and host_allowed("[fe80::1]:1", configured)
    assert host_allowed("localhost:8501", configured)
    assert not host_allowed("evil.example", configured)
