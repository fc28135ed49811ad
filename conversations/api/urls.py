from django.urls import path

from conversations.api import sse

urlpatterns = [
    path("runs/<uuid:run_id>/events/", sse.run_events, name="run-events"),
]
