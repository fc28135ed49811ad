"""What a credential may do: the scopes of API keys.

- `read`: every read: lists, pages, searches, exports, a run's events (SSE, `subscribe`
  on the websocket), the models, tools and tool servers.
- `chat`: everything that writes a conversation or makes the model work (send, edit,
  regenerate, `chat/`, `stateless/chat/`, `/openai/v1` writes, the websocket's writing
  frames), and the other writes: one's own token for a tool server, staff's tool server
  changes (which need the model permission besides). It includes `read`: a client reads
  what it writes.
- `keys`: list, create and revoke API keys, never beyond the key's own scopes.

Sessions (the web pages, the password path) hold every scope. A key's scopes are fixed
when it is created, its implied scopes stored along (`chat` is stored as `chat, read`).
"""

from collections.abc import Iterable

from accounts.models import ALL_SCOPES, SCOPE_IMPLIES, ApiKey, Scope, scopes_unknown

CHAT: str = Scope.CHAT.value
READ: str = Scope.READ.value
KEYS: str = Scope.KEYS.value

# What a method asks for when the view names no scope: reading or writing.
READING_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class ScopeMissing(Exception):
    """The credential lacks `required`; nothing was done."""

    def __init__(self, required: str, message: str | None = None) -> None:
        self.required = required
        super().__init__(message or f"This API key lacks the {required!r} scope.")


def scopes_normalize(*, scopes: Iterable[str]) -> list[str]:
    """Known scope names with the ones they imply, sorted; ValueError for an unknown
    name or none at all."""
    names = list(scopes)
    problem = scopes_unknown(names)
    if problem:
        raise ValueError(problem)
    if not names:
        raise ValueError("An API key needs at least one scope.")
    held = set(names)
    for name in names:
        held |= SCOPE_IMPLIES.get(name, frozenset())
    return sorted(held)


def scopes_held(*, api_key: ApiKey | None) -> frozenset[str]:
    """What the credential may do: a key its own scopes; no key (a session, a password)
    everything."""
    if api_key is None:
        return ALL_SCOPES
    return frozenset(api_key.scopes)


def scope_for_method(method: str) -> str:
    """The scope a request needs when its view names none."""
    return READ if method.upper() in READING_METHODS else CHAT


def scope_require(*, held: frozenset[str], required: str) -> None:
    """ScopeMissing unless `required` is held."""
    if required not in held:
        raise ScopeMissing(required)


def scopes_grantable(*, held: frozenset[str], wanted: Iterable[str]) -> None:
    """ScopeMissing when `wanted` holds a scope the granting credential lacks: a key
    never passes on more than it has."""
    lacking = sorted(set(wanted) - held)
    if lacking:
        raise ScopeMissing(
            lacking[0],
            f"This API key cannot grant {', '.join(map(repr, lacking))}: a key only "
            "grants scopes it holds itself.",
        )
