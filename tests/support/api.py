"""Reading the REST API's answers."""

from typing import Any


def error_of(response: Any) -> dict[str, Any]:
    """The `error` object of an error answer, checked to be in the API's one shape."""
    body: dict[str, Any] = response.json()
    assert set(body) == {"error"}, body
    assert {"code", "message"} <= set(body["error"]), body
    return body["error"]
