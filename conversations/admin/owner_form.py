"""The owner picker above the conversation list: an autocomplete, never a <select> of
every user (there may be millions)."""

from typing import Any

from django import forms
from django.contrib.admin.widgets import AutocompleteSelect
from django.http import HttpRequest

from accounts.models import User
from conversations.models import Conversation


class OwnerForm(forms.Form):
    def __init__(self, admin_site: Any, request: HttpRequest) -> None:
        chosen = request.GET.get("owner", "")
        picked = chosen.isdigit()
        super().__init__({"owner": chosen} if picked else None, auto_id="owner_filter_%s")
        self.fields["owner"] = forms.ModelChoiceField(
            # Only the chosen user is rendered; the widget asks the server for the rest.
            queryset=User.objects.filter(pk=int(chosen)) if picked else User.objects.none(),
            required=False,
            label="Owner",
            widget=AutocompleteSelect(Conversation._meta.get_field("owner"), admin_site),
        )
