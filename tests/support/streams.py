"""Reading async streams from sync test code."""

import asyncio
from collections.abc import AsyncIterator
from typing import Any, TypeVar

T = TypeVar("T")


def drain(stream: AsyncIterator[T], *, closing: Any = None) -> list[T]:
    """Every item of an async stream, read on a fresh event loop; `closing.aclose()` is
    awaited after, also on error (a provider's HTTP client belongs to that loop)."""

    async def collect() -> list[T]:
        try:
            return [item async for item in stream]
        finally:
            if closing is not None:
                await closing.aclose()

    return asyncio.run(collect())
