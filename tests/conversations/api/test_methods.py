"""A method an endpoint does not serve, or a refused CSRF token, is answered in the API's
JSON shape on every /api/ path (the event stream, the schema and the docs included)."""

import json
import re
from collections.abc import Iterator

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from tests.support.api import error_of

pytestmark = pytest.mark.django_db

ANY_ID = "00000000-0000-0000-0000-000000000000"


def _routes(patterns: list[URLPattern | URLResolver], prefix: str = "") -> Iterator[str]:
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            yield from _routes(pattern.url_patterns, route)
        elif route.startswith("api/"):
            yield route


def api_paths() -> list[str]:
    """Every /api/ route of the project, with an id where it takes one; the catch-all
    patterns stand for a path that matches nothing."""
    paths = []
    for route in _routes(get_resolver().url_patterns):
        route = re.sub(r"<\w+:\w+>", ANY_ID, route)
        route = route.replace("^.*$", "no-such-endpoint/").replace("^", "")
        paths.append("/" + route)
    return sorted(set(paths))


def test_the_route_list_covers_the_api():
    paths = api_paths()
    assert f"/api/v1/runs/{ANY_ID}/events/" in paths
    assert "/api/docs/" in paths
    assert "/api/v1/conversations/" in paths
    assert len(paths) >= 20


@pytest.mark.parametrize("path", api_paths())
def test_a_method_no_endpoint_serves_is_a_json_405_with_allow(owner, path):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    response = client.generic("TRACE", path)
    if path.endswith("no-such-endpoint/"):
        assert response.status_code == 404
        assert error_of(response)["code"] == "unknown_url"
    else:
        assert response.status_code == 405
        assert response["Allow"]
        assert error_of(response)["code"] == "method_not_allowed"
    assert response["Content-Type"].startswith("application/json")


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
@pytest.mark.parametrize("path", api_paths())
def test_unsafe_methods_never_answer_html(owner, path, method):
    """With a session cookie and no CSRF token (as a cross-site form would send), and
    anonymously: a JSON error, never Django's HTML refusal page."""
    with_session = Client(enforce_csrf_checks=True)
    with_session.force_login(owner)
    for client in (with_session, Client(enforce_csrf_checks=True)):
        response = client.generic(method, path, "{}", content_type="application/json")
        assert response.status_code in (401, 403, 404, 405), response.content[:200]
        assert response["Content-Type"].startswith("application/json")
        assert error_of(response)["code"]


def test_the_event_stream_refuses_a_post_as_json_with_allow(owner):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    response = client.post(f"/api/v1/runs/{ANY_ID}/events/")
    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD"
    assert error_of(response)["code"] == "method_not_allowed"


@pytest.mark.parametrize("path", ["/api/schema/", "/api/docs/", "/api/redoc/"])
def test_the_schema_and_docs_refuse_writes_as_json(path):
    response = Client(enforce_csrf_checks=True).post(path)
    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD, OPTIONS"
    assert error_of(response)["code"] == "method_not_allowed"
    assert Client().get(path).status_code == 200


def test_a_refused_csrf_token_elsewhere_is_still_the_sites_page(owner):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    response = client.post("/accounts/api-keys/", {"name": "k"})
    assert response.status_code == 403
    assert response["Content-Type"].startswith("text/html")


def test_a_csrf_refusal_on_any_api_path_is_json(rf, settings):
    """Whatever view a future /api/ path has, Django's own CSRF refusal answers JSON there."""
    from django.http import HttpResponse
    from django.middleware.csrf import CsrfViewMiddleware

    def unprotected_view(request):
        raise AssertionError("the CSRF check lets nothing through without a token")

    request = rf.post("/api/v1/some-new-endpoint/")
    request.COOKIES[settings.CSRF_COOKIE_NAME] = "x" * 32
    response = CsrfViewMiddleware(HttpResponse).process_view(request, unprotected_view, (), {})
    assert response is not None
    assert response.status_code == 403
    assert json.loads(response.content)["error"]["code"] == "permission_denied"
