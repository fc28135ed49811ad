"""What people and models wrote stays behind `view_transcript` in every corner of the admin.

Django's change lists accept any field lookup in the query string
(`?content__startswith=Hel`, `?metadata__key__regex=...`), and the count of matching rows
answers the question one letter at a time; an ordering by a text column does the same
through the order of rows; the search box and the autocomplete match text too. So every
admin of the project mixes in TextGuardMixin, which asks this module whether a lookup, an
ordering or a search touches a text field, on the model itself or across relations:

- staff without the transcript permission are refused any such lookup (Django's 400 for a
  disallowed lookup, the same page whatever the data holds), their orderings by text are
  dropped and their searches never match text;
- staff with it may use them, and each request that does is audited (a `viewed` event
  naming the lookups and search terms);
- secrets (password hashes, API key hashes, tool servers' encrypted secrets and tokens)
  are never a lookup or an ordering, for anyone.

A lookup the database cannot answer (a JSON `contains` on SQLite, an invalid regex,
`seq__gt=abc`, a bad date) is answered with the change list's own "invalid filter"
redirect (`?e=1`), never a 500.
"""

from collections.abc import Iterable, Iterator
from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import (
    ERROR_FLAG,
    IGNORED_PARAMS,
    PAGE_VAR,
    ChangeList,
)
from django.core.exceptions import FieldDoesNotExist, FieldError, ValidationError
from django.db import DatabaseError, models, transaction
from django.db.models.expressions import BaseExpression, F
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.http.response import HttpResponseBase
from django.template.response import SimpleTemplateResponse

from accounts.models import ApiKey, User
from conversations import services
from conversations.admin.common import actor, can_read_transcripts
from conversations.models import (
    Conversation,
    Folder,
    Message,
    Run,
    Share,
    StoredFile,
    Tag,
    ToolCredential,
    ToolServer,
)

Fields = dict[type[models.Model], frozenset[str]]

# Fields holding what people and models wrote. Titles are made from the first message;
# metadata is whatever a client chose to attach; a run's error may quote the provider's
# answer; a run's client id is a string the client chose; a message's reasoning is what a
# model thought about the user's words; a file's name is what its uploader called it, and
# so are a folder's and a tag's.
# Tool names, tool call ids, roles, models and counts are metadata moderators work with.
TEXT_FIELDS: Fields = {
    Conversation: frozenset({"title", "system_prompt", "draft", "metadata"}),
    Message: frozenset({"content", "reasoning", "tool_calls", "provider_payload"}),
    Run: frozenset({"error", "client_id"}),
    StoredFile: frozenset({"filename"}),
    Folder: frozenset({"name"}),
    Tag: frozenset({"name"}),
}
# Never filtered or ordered by, whoever asks: a prefix lookup would read a hash out.
SECRET_FIELDS: Fields = {
    User: frozenset({"password"}),
    ApiKey: frozenset({"hashed_secret"}),
    ToolServer: frozenset({"secret_encrypted"}),
    ToolCredential: frozenset({"token_encrypted"}),
    Share: frozenset({"token_hash"}),
}
# Query-string parameters of the change list that are not field lookups.
NON_LOOKUP_PARAMS = frozenset({*IGNORED_PARAMS, PAGE_VAR, ERROR_FLAG, "_changelist_filters"})
# Errors a hand-written lookup can raise once the query runs.
BAD_LOOKUP_ERRORS = (DatabaseError, FieldError, ValidationError, ValueError, TypeError)
# Set on a request while its change list is built: its searches are audited with its
# lookups, in one event.
IN_CHANGELIST = "_text_guard_changelist"


def _reaches(model: type[models.Model], lookup: str, fields: Fields) -> bool:
    """Whether `lookup` (`a__b__c`, Django's syntax) reads one of `fields` anywhere on its
    path, following relations in both directions."""
    current: type[models.Model] | None = model
    for part in lookup.split("__"):
        if current is None or part == "pk":
            return False
        if part in fields.get(current, frozenset()):
            return True
        try:
            field: Any = current._meta.get_field(part)
        except FieldDoesNotExist:
            # The rest is a lookup or transform (`contains`, `0`, a JSON key): the fields
            # it could reach were checked above.
            return False
        current = field.related_model if field.is_relation else None
    return False


def lookup_touches_text(model: type[models.Model], lookup: str) -> bool:
    return _reaches(model, lookup, TEXT_FIELDS)


def lookup_touches_secret(model: type[models.Model], lookup: str) -> bool:
    return _reaches(model, lookup, SECRET_FIELDS)


def _lookup_params(params: Any) -> Iterator[str]:
    return (key for key in params if key not in NON_LOOKUP_PARAMS)


def text_lookups(model: type[models.Model], params: Any) -> list[str]:
    return sorted(key for key in _lookup_params(params) if lookup_touches_text(model, key))


def _ordering_names(part: Any) -> Iterator[str]:
    """The field paths an ordering entry (a name, `-name`, F() or an expression) sorts by."""
    if isinstance(part, str):
        yield part.lstrip("-")
    elif isinstance(part, F):
        yield part.name
    elif isinstance(part, BaseExpression):
        for source in part.get_source_expressions():
            yield from _ordering_names(source)


def _quoted(text: str) -> str:
    # The size of what was typed, never the text: a search for message text would
    # otherwise copy that text into the audit trail, which outlives the conversation
    # (a user's deletion and retention must not leave it behind) and which staff without
    # the transcript permission may read.
    return f"<{len(text)} characters>"


class GuardedChangeList(ChangeList):
    """Drops orderings by text for those who may not read it, and by secrets for all,
    whether they come from `?o=` or elsewhere."""

    def get_ordering(self, request: HttpRequest, queryset: Any) -> list[Any]:
        readable = can_read_transcripts(request)
        ordering: Iterable[Any] = super().get_ordering(request, queryset)
        return [
            part
            for part in ordering
            if not any(
                lookup_touches_secret(self.model, name)
                or (not readable and lookup_touches_text(self.model, name))
                for name in _ordering_names(part)
            )
        ]


class TextGuardMixin(admin.ModelAdmin):
    """Mixed into every admin of the project (see the module's docstring)."""

    # Whether the search box of this admin matches text (then matching is audited for
    # readers; admins make sure it matches no text for anyone else).
    search_reads_text = False

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        if lookup_touches_secret(self.model, lookup):
            return False
        # Permitted ones are audited in changelist_view.
        if lookup_touches_text(self.model, lookup) and (
            request is None or not can_read_transcripts(request)
        ):
            return False
        return super().lookup_allowed(lookup, value, request)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return GuardedChangeList

    def get_sortable_by(self, request: HttpRequest) -> Any:
        # Only the column headers: GuardedChangeList enforces it.
        sortable = super().get_sortable_by(request)
        readable = can_read_transcripts(request)
        return [
            name
            for name in self.get_list_display(request)
            if name in sortable and not self._orders_by_protected(name, readable=readable)
        ]

    def _orders_by_protected(self, name: Any, *, readable: bool) -> bool:
        ordering = getattr(getattr(self, str(name), None), "admin_order_field", None)
        target = ordering if isinstance(ordering, str) else str(name)
        target = target.lstrip("-")
        return lookup_touches_secret(self.model, target) or (
            not readable and lookup_touches_text(self.model, target)
        )

    def get_search_results(
        self, request: HttpRequest, queryset: models.QuerySet[Any], search_term: str
    ) -> tuple[models.QuerySet[Any], bool]:
        """The change list's search box and the autocomplete both come here."""
        found = self.search_results(request, queryset, search_term)
        term = search_term.strip()
        if term and self.search_reads_text and can_read_transcripts(request):
            read = f"search {_quoted(term)}"
            reads: list[str] | None = getattr(request, IN_CHANGELIST, None)
            if reads is None:
                self._audit(request, "autocomplete", [read])
            elif read not in reads:
                reads.append(read)
        return found

    def search_results(
        self, request: HttpRequest, queryset: models.QuerySet[Any], search_term: str
    ) -> tuple[models.QuerySet[Any], bool]:
        """What a search term matches; admins that search text override this."""
        return super().get_search_results(request, queryset, search_term)

    def _audit(self, request: HttpRequest, where: str, reads: list[str]) -> None:
        services.audit_search_record(
            actor=actor(request),
            reason=f"{self.model._meta.model_name} {where}: {', '.join(reads)}"[:1000],
        )

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        reads = [
            f"{key}={_quoted(request.GET.get(key, ''))}"
            for key in text_lookups(self.model, request.GET)
        ]
        setattr(request, IN_CHANGELIST, reads)
        try:
            # A savepoint, so a query the database refused leaves the connection usable.
            with transaction.atomic():
                response: HttpResponseBase = super().changelist_view(request, extra_context)
                # The query runs while the page renders: render here to catch its errors.
                render = getattr(response, "render", None)
                if render is not None:
                    render()
        except BAD_LOOKUP_ERRORS:
            return self._invalid_filter(request)
        finally:
            delattr(request, IN_CHANGELIST)
        refused = response.status_code >= 400 or response.get("Location", "").endswith(
            f"?{ERROR_FLAG}=1"
        )
        if reads and not refused and can_read_transcripts(request):
            self._audit(request, "list", reads)
        return response  # type: ignore[return-value]

    def _invalid_filter(self, request: HttpRequest) -> HttpResponse:
        """The change list's own answer to a filter it cannot apply."""
        if ERROR_FLAG in request.GET:
            page = SimpleTemplateResponse(
                "admin/invalid_setup.html", {"title": "Invalid filter"}, status=400
            )
            return page.render()
        return HttpResponseRedirect(f"{request.path}?{ERROR_FLAG}=1")
