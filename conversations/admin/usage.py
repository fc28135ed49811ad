"""The usage dashboard: messages and tokens per day, top users, a per-user table, and the
users storing the most files."""

from datetime import date, timedelta
from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone

from conversations import selectors
from conversations.admin.charts import bar_chart, column_chart

DEFAULT_DAYS = 30
MAX_DAYS = 366
TOP_USERS = 10
PER_PAGE = 50
# Users listed in the storage table (the heaviest; the rest are not listed).
STORAGE_USERS = 50


class RangeForm(forms.Form):
    start = forms.DateField(widget=forms.DateInput(attrs={"type": "date"}))
    end = forms.DateField(widget=forms.DateInput(attrs={"type": "date"}))

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        start, end = data.get("start"), data.get("end")
        if start and end:
            if start > end:
                raise forms.ValidationError("The start date must not be after the end date.")
            if (end - start).days + 1 > MAX_DAYS:
                raise forms.ValidationError(f"Choose at most {MAX_DAYS} days.")
        return data


def _range(request: HttpRequest) -> tuple[RangeForm, date, date]:
    today = timezone.now().date()
    default_start = today - timedelta(days=DEFAULT_DAYS - 1)
    if "start" in request.GET or "end" in request.GET:
        form = RangeForm(request.GET)
        if form.is_valid():
            return form, form.cleaned_data["start"], form.cleaned_data["end"]
        return form, default_start, today
    return RangeForm(initial={"start": default_start, "end": today}), default_start, today


def usage_view(model_admin: admin.ModelAdmin, request: HttpRequest) -> HttpResponse:
    """Aggregates only, no message text: the conversation view permission suffices."""
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    form, start, end = _range(request)
    page_raw = request.GET.get("page", "1")
    page = max(1, int(page_raw)) if page_raw.isdigit() else 1
    days = selectors.usage_by_day(start=start, end=end)
    users = selectors.usage_by_user(
        start=start, end=end, offset=(page - 1) * PER_PAGE, limit=PER_PAGE + 1
    )
    # The table's first page already holds the top users; no second aggregation then.
    top = (
        users[:TOP_USERS]
        if page == 1
        else selectors.usage_by_user(start=start, end=end, limit=TOP_USERS)
    )
    labels = [day.day.isoformat() for day in days]
    storage_order = "files" if request.GET.get("storage") == "files" else "bytes"
    query = f"start={start.isoformat()}&end={end.isoformat()}"
    context: dict[str, Any] = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": "Usage",
        "form": form,
        "start": start,
        "end": end,
        "totals": {
            "messages": sum(day.messages for day in days),
            "user_messages": sum(day.user_messages for day in days),
            "tokens": sum(day.tokens for day in days),
        },
        "messages_chart": column_chart(
            list(zip(labels, [d.messages for d in days], strict=True)),
            label="Messages per day",
            color="#417690",
        ),
        "tokens_chart": column_chart(
            list(zip(labels, [d.tokens for d in days], strict=True)),
            label="Tokens per day",
            color="#c0792f",
        ),
        "top_chart": bar_chart(
            [(user.username, user.tokens) for user in top],
            label="Top users by tokens",
            color="#5b8c5a",
        ),
        "users": users[:PER_PAGE],
        "page": page,
        "previous_page": page - 1 if page > 1 else None,
        "next_page": page + 1 if len(users) > PER_PAGE else None,
        "storage": selectors.storage_by_user(order=storage_order, limit=STORAGE_USERS),
        "storage_order": storage_order,
        "query": query,
    }
    return TemplateResponse(request, "admin/conversations/conversation/usage.html", context)
