"""LLM providers. `provider_get()` picks the configured one: OpenAI-compatible when
OPENAI_API_KEY is set, else the offline demo model."""

from __future__ import annotations

import functools

from django.conf import settings

from conversations.engine.llm.base import Provider


def provider_is_demo() -> bool:
    return not settings.OPENAI_API_KEY


def provider_get() -> Provider:
    # Imported here so importing conversations.engine.llm (e.g. for tools) does not load the SDK.
    from conversations.engine.llm.demo import DemoProvider

    if provider_is_demo():
        return DemoProvider()
    return _openai_provider(
        settings.OPENAI_API_KEY,
        settings.OPENAI_BASE_URL,
        settings.OPENAI_TIMEOUT_SECONDS,
        settings.OPENAI_MAX_RETRIES,
    )


@functools.lru_cache(maxsize=4)
def _openai_provider(api_key: str, base_url: str, timeout: float, max_retries: int) -> Provider:
    """One provider per configuration, so its HTTP connection pool is reused between
    model calls (no new TLS handshake per call)."""
    from conversations.engine.llm.openai_provider import OpenAIProvider

    return OpenAIProvider(
        api_key=api_key, base_url=base_url or None, timeout=timeout, max_retries=max_retries
    )
