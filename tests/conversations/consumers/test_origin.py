"""A cookie socket is accepted from exactly the origins Django's CSRF protection accepts
for a form post: the page's own scheme, host and port (behind a TLS proxy as the proxy
says), or a trusted origin, wildcards included. Each case is tried both ways, against the
real HTTP stack and against the real socket, so the two cannot drift apart."""

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import Client

from tests.support.sockets import session_cookie, socket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_url")]

TRUSTED = ["https://chat.example.org", "https://*.apps.example.org"]
PROXY = {"SECURE_PROXY_SSL_HEADER": ("HTTP_X_FORWARDED_PROTO", "https")}
HTTPS = {"x-forwarded-proto": "https"}

# (origin, request headers besides the Origin, settings, accepted)
CASES: list[tuple[str, dict[str, str], dict[str, Any], bool]] = [
    ("http://localhost:8000", {"host": "localhost:8000"}, {}, True),
    ("http://127.0.0.1:8000", {"host": "127.0.0.1:8000"}, {}, True),
    ("http://[::1]:8000", {"host": "[::1]:8000"}, {}, True),
    # Same host, another port or scheme: another origin.
    ("http://127.0.0.1:9999", {"host": "127.0.0.1:8000"}, {}, False),
    ("http://localhost:3000", {"host": "localhost:8000"}, {}, False),
    ("http://[::1]:8001", {"host": "[::1]:8000"}, {}, False),
    ("http://localhost", {"host": "localhost:8000"}, {}, False),
    ("https://localhost:8000", {"host": "localhost:8000"}, {}, False),
    ("http://localhost:8000/", {"host": "localhost:8000"}, {}, False),
    ("http://LOCALHOST:8000", {"host": "localhost:8000"}, {}, False),
    ("null", {"host": "localhost:8000"}, {}, False),
    # Behind a proxy that ends TLS: its header says the page was https.
    ("https://localhost", {"host": "localhost", **HTTPS}, PROXY, True),
    ("http://localhost", {"host": "localhost", **HTTPS}, PROXY, False),
    ("https://localhost", {"host": "localhost"}, PROXY, False),
    # ...and, when told to trust it, which host the page was on.
    (
        "https://localhost:8443",
        {"host": "127.0.0.1:8000", "x-forwarded-host": "localhost:8443", **HTTPS},
        {**PROXY, "USE_X_FORWARDED_HOST": True},
        True,
    ),
    (
        "https://localhost:8443",
        {"host": "127.0.0.1:8000", "x-forwarded-host": "localhost:8443", **HTTPS},
        PROXY,
        False,
    ),
    # Trusted origins, exact and by wildcard, scheme included.
    (
        "https://chat.example.org",
        {"host": "localhost:8000"},
        {"CSRF_TRUSTED_ORIGINS": TRUSTED},
        True,
    ),
    (
        "http://chat.example.org",
        {"host": "localhost:8000"},
        {"CSRF_TRUSTED_ORIGINS": TRUSTED},
        False,
    ),
    (
        "https://a.apps.example.org",
        {"host": "localhost:8000"},
        {"CSRF_TRUSTED_ORIGINS": TRUSTED},
        True,
    ),
    (
        "http://a.apps.example.org",
        {"host": "localhost:8000"},
        {"CSRF_TRUSTED_ORIGINS": TRUSTED},
        False,
    ),
    (
        "https://apps.example.org.evil.example",
        {"host": "localhost:8000"},
        {"CSRF_TRUSTED_ORIGINS": TRUSTED},
        False,
    ),
    # A development server with no ALLOWED_HOSTS serves its own localhost pages.
    (
        "http://localhost:8000",
        {"host": "localhost:8000"},
        {"DEBUG": True, "ALLOWED_HOSTS": []},
        True,
    ),
]


def http_post_accepted(origin: str, headers: dict[str, str]) -> bool:
    """Whether Django's CSRF protection lets a form post with this Origin through."""
    client = Client(enforce_csrf_checks=True)
    secret = "a" * 32
    client.cookies["csrftoken"] = secret
    response = client.post(
        "/accounts/logout/", {"csrfmiddlewaretoken": secret}, headers={"origin": origin, **headers}
    )
    assert response.status_code in (302, 403), response.status_code
    return response.status_code == 302


@pytest.mark.parametrize(("origin", "headers", "overrides", "accepted"), CASES)
async def test_a_cookie_socket_is_accepted_exactly_where_a_form_post_is(
    conversation, owner, settings, origin, headers, overrides, accepted
):
    for name, value in overrides.items():
        setattr(settings, name, value)
    assert await sync_to_async(http_post_accepted)(origin, headers) is accepted

    cookie = await sync_to_async(session_cookie)(owner)
    wire = [(name.encode(), value.encode()) for name, value in headers.items()]
    ws = socket(conversation.pk, (b"origin", origin.encode()), (b"cookie", cookie), *wire)
    connected, _ = await ws.connect()
    assert connected is accepted
    if accepted:
        assert (await ws.receive_json_from(timeout=5))["type"] == "conversation.connected"
        await ws.disconnect()
