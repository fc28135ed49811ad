"""The OpenAPI document: valid, complete, rendered by the docs page; and the API checked
against it by Schemathesis (generated requests, authenticated with an API key): no 5xx, and
every response matches the documented status codes, content types and schemas."""

import pytest
import schemathesis
import yaml
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from drf_spectacular.validation import validate_schema
from hypothesis import HealthCheck, Phase, settings
from rest_framework.test import APIClient
from schemathesis import checks

from accounts import services as account_services
from accounts.models import ALL_SCOPES, User

pytestmark = pytest.mark.django_db


def test_the_schema_is_valid_openapi_3_with_every_endpoint():
    response = APIClient().get("/api/schema/")
    assert response.status_code == 200
    schema = yaml.safe_load(response.content)
    validate_schema(schema)
    assert schema["openapi"].startswith("3.")
    paths = schema["paths"]
    assert "/api/v1/chat/" in paths
    assert "/api/v1/runs/{run_id}/events/" in paths
    for path, operations in paths.items():
        for method, operation in operations.items():
            if method == "parameters":
                continue
            assert operation.get("summary"), (method, path)
            assert "400" in operation["responses"]
            assert "404" in operation["responses"]
            if method == "post":
                names = [p["name"] for p in operation.get("parameters", [])]
                assert "Idempotency-Key" in names, path


def test_the_docs_page_renders_without_any_cdn():
    response = APIClient().get("/api/docs/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "swagger-ui" in page.lower()
    # No inline script: the start-up script is a file, allowed by the page's CSP.
    assert "<script>" not in page
    assert "script-src 'self'" in response["Content-Security-Policy"]
    start_up = APIClient().get("/api/docs/", {"script": ""})
    assert start_up.status_code == 200
    assert "/api/schema/" in start_up.content.decode()
    # Served from the bundled static files: the docs work without internet access.
    for text in (page, start_up.content.decode()):
        assert "cdn." not in text
        assert "unpkg" not in text
        assert "jsdelivr" not in text


# Loaded from /api/schema/ as served by the app in this process (no database needed).
schema = schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application())


@pytest.fixture
def app_in_test(db, redis_url, settings):
    """Requests run inside the test's transaction, quickly, and without throttling."""
    settings.PARLEY_CHAT_WAIT_SECONDS = 0
    settings.PARLEY_DEMO_TOKENS_PER_SECOND = 0
    settings.PARLEY_API_THROTTLE_RATE = "100000/minute"
    settings.PARLEY_API_MODEL_THROTTLE_RATE = "100000/minute"
    # As Django's test client does: the test's transaction must outlive each request.
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


# Conformance, not acceptance: a schema-valid body may still break a rule the schema cannot
# express (an unknown tool name, a fork point past the end, a reused key) and get a 4xx.
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_headers_conformance,
    checks.response_schema_conformance,
]


@pytest.fixture
def bearer(db) -> dict[str, str]:
    user = User.objects.create_user(username="fuzzer", password="pw-fuzzer-123")
    every = sorted(ALL_SCOPES)
    _, secret = account_services.api_key_create(owner=user, name="schemathesis", scopes=every)
    return {"Authorization": f"Bearer {secret}"}


@schema.parametrize()
@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_the_api_keeps_to_its_schema(case, bearer, app_in_test):
    case.call_and_validate(headers=bearer, checks=CHECKS)
