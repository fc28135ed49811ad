"""The models replies come from."""

from rest_framework.request import Request
from rest_framework.response import Response

from conversations.errors import NotFound
from conversations.openai_api.base import OpenAIView
from conversations.openai_api.errors import quoted
from conversations.openai_api.objects import model_objects


class ModelsView(OpenAIView):
    def get(self, request: Request) -> Response:
        return Response({"object": "list", "data": model_objects()})


class ModelView(OpenAIView):
    def get(self, request: Request, model_id: str) -> Response:
        for model in model_objects():
            if model["id"] == model_id:
                return Response(model)
        raise NotFound(f"The model '{quoted(model_id)}' does not exist.")
