"""What people and models wrote stays behind `view_transcript` in every corner of the admin.

Django's change lists accept any field lookup in the query string
(`?content__startswith=Hel`, `?conversation__draft__regex=...`), and the count of matching
rows answers the question one letter at a time. So every admin of the project asks this
module whether a lookup, an ordering or a search touches a text field. Staff without the
transcript permission are refused (a 400 that is the same whatever the data holds); staff
with it may use them, and each such request is audited like a transcript page.

A lookup that the database cannot answer (a JSON `contains` on SQLite, an invalid regex,
`seq__gt=abc`) is answered with the change list's own "invalid filter" page, never a 500.
"""

from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ERROR_FLAG, IGNORED_PARAMS, PAGE_VAR, SEARCH_VAR
from django.core.exceptions import FieldDoesNotExist, FieldError, ValidationError
from django.db import DatabaseError, models, transaction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.http.response import HttpResponseBase
from django.template.response import SimpleTemplateResponse

from conversations import services
from conversations.admin.common import actor, can_read_transcripts
from conversations.models import Conversation, Message

# Fields holding what people and models wrote. Titles are made from the first message,
# so they count too; metadata is whatever a client chose to attach.
TEXT_FIELDS: dict[type[models.Model], frozenset[str]] = {
    Conversation: frozenset({"title", "system_prompt", "draft", "metadata"}),
    Message: frozenset({"content", "tool_calls", "provider_payload"}),
}
# Query-string parameters of the change list that are not field lookups.
NON_LOOKUP_PARAMS = frozenset({*IGNORED_PARAMS, PAGE_VAR, ERROR_FLAG, "_changelist_filters"})
# Errors a hand-written lookup can raise once the query runs.
BAD_LOOKUP_ERRORS = (DatabaseError, FieldError, ValidationError, ValueError, TypeError)


def lookup_touches_text(model: type[models.Model], lookup: str) -> bool:
    """Whether `lookup` (`a__b__c`, Django's syntax) reads a text field anywhere on its path,
    following relations in both directions."""
    current: type[models.Model] | None = model
    for part in lookup.split("__"):
        if current is None:
            return False
        if part == "pk":
            return False
        if part in TEXT_FIELDS.get(current, frozenset()):
            return True
        try:
            field: Any = current._meta.get_field(part)
        except FieldDoesNotExist:
            # The rest is a lookup or transform (`contains`, `0`, a JSON key): the fields
            # it could reach were checked above.
            return False
        current = field.related_model if field.is_relation else None
    return False


def text_lookups(model: type[models.Model], params: Any) -> list[str]:
    return sorted(
        key for key in params if key not in NON_LOOKUP_PARAMS and lookup_touches_text(model, key)
    )


class TextGuardMixin(admin.ModelAdmin):
    """Mixed into every admin of the project (see the module's docstring)."""

    # Whether the search box of this admin matches text (then it needs the permission).
    search_reads_text = False

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        # Permitted ones are audited in changelist_view.
        if lookup_touches_text(self.model, lookup) and (
            request is None or not can_read_transcripts(request)
        ):
            return False
        return super().lookup_allowed(lookup, value, request)

    def get_sortable_by(self, request: HttpRequest) -> Any:
        sortable = super().get_sortable_by(request)
        if can_read_transcripts(request):
            return sortable
        # The order of rows sorted by a text column tells how its text compares.
        return [
            name
            for name in self.get_list_display(request)
            if name in sortable and not self._orders_by_text(name)
        ]

    def _orders_by_text(self, name: Any) -> bool:
        ordering = getattr(getattr(self, str(name), None), "admin_order_field", None)
        target = ordering if isinstance(ordering, str) else str(name)
        return lookup_touches_text(self.model, target.lstrip("-"))

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        touched = text_lookups(self.model, request.GET)
        search = request.GET.get(SEARCH_VAR, "").strip()
        if request.method != "GET":
            return super().changelist_view(request, extra_context)
        try:
            # A savepoint, so a query the database refused leaves the connection usable.
            with transaction.atomic():
                response: HttpResponseBase = super().changelist_view(request, extra_context)
                # The query runs while the page renders: render here to catch its errors.
                render = getattr(response, "render", None)
                if render is not None:
                    render()
        except BAD_LOOKUP_ERRORS:
            # The change list's own answer to a filter it cannot apply.
            if ERROR_FLAG in request.GET:
                page = SimpleTemplateResponse(
                    "admin/invalid_setup.html", {"title": "Invalid filter"}, status=400
                )
                return page.render()
            return HttpResponseRedirect(f"{request.path}?{ERROR_FLAG}=1")
        if response.status_code == 200 and can_read_transcripts(request):
            reads = list(touched)
            if search and self.search_reads_text:
                reads.append(f"search {search!r}")
            if reads:
                services.audit_search_record(
                    actor=actor(request),
                    reason=f"{self.model._meta.model_name} list: {', '.join(reads)}"[:1000],
                )
        return response  # type: ignore[return-value]
