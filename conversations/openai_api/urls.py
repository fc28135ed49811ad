"""/openai/v1/: paths as OpenAI's API spells them (no trailing slash; one is tolerated)."""

from django.urls import re_path

from conversations.openai_api.errors import unknown_url
from conversations.openai_api.views import compact, conversations, files, items, models, responses

_CONVERSATION = r"conversations/(?P<conversation_id>[^/]+)"
_RESPONSE = r"responses/(?P<response_id>[^/]+)"
_FILE = r"files/(?P<file_id>[^/]+)"

urlpatterns = [
    re_path(r"^conversations/?$", conversations.ConversationsView.as_view()),
    re_path(rf"^{_CONVERSATION}/?$", conversations.ConversationView.as_view()),
    re_path(rf"^{_CONVERSATION}/items/?$", items.ItemsView.as_view()),
    re_path(rf"^{_CONVERSATION}/items/(?P<item_id>[^/]+)/?$", items.ItemView.as_view()),
    re_path(r"^responses/?$", responses.ResponsesView.as_view()),
    # Before the response's own route, which would take `compact` for an id.
    re_path(r"^responses/compact/?$", compact.CompactView.as_view()),
    re_path(rf"^{_RESPONSE}/?$", responses.ResponseView.as_view()),
    re_path(rf"^{_RESPONSE}/cancel/?$", responses.ResponseCancelView.as_view()),
    re_path(rf"^{_RESPONSE}/input_items/?$", responses.InputItemsView.as_view()),
    re_path(r"^files/?$", files.FilesView.as_view()),
    re_path(rf"^{_FILE}/?$", files.FileView.as_view()),
    re_path(rf"^{_FILE}/content/?$", files.FileContentView.as_view()),
    re_path(r"^models/?$", models.ModelsView.as_view()),
    # Model names may hold a slash (an organisation's prefix, as some servers name them).
    re_path(r"^models/(?P<model_id>.+?)/?$", models.ModelView.as_view()),
    # Anything else is OpenAI's JSON 404, never an HTML page.
    re_path(r"^.*$", unknown_url),
]
