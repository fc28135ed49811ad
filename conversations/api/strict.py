"""Request serializers that take JSON at its word.

DRF's fields coerce: `{"title": 123}` becomes "123", `{"archived": "yes"}` becomes True,
`{"conversation_id": 5}` a UUID, and unknown fields are dropped in silence, so a client's
typo or bug goes unnoticed. These fields want the JSON type they name, and a
StrictSerializer refuses fields it does not know, each listed by its JSON path.
"""

from collections.abc import Mapping
from typing import Any

from rest_framework import serializers


class StrictCharField(serializers.CharField):
    default_error_messages = {"invalid": "must be a string"}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    default_error_messages = {"invalid": "must be true or false"}

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class StrictIntegerField(serializers.IntegerField):
    default_error_messages = {"invalid": "must be a whole number"}

    def to_internal_value(self, data: Any) -> int:
        if not isinstance(data, int) or isinstance(data, bool):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictFloatField(serializers.FloatField):
    default_error_messages = {"invalid": "must be a number"}

    def to_internal_value(self, data: Any) -> float:
        if not isinstance(data, int | float) or isinstance(data, bool):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictChoiceField(serializers.ChoiceField):
    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            self.fail("invalid_choice", input=type(data).__name__)
        return super().to_internal_value(data)


class StrictUUIDField(serializers.UUIDField):
    default_error_messages = {"invalid": "must be an id (a UUID string)"}

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictSerializer(serializers.Serializer):
    """Refuses fields it does not declare (nested serializers included)."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = sorted(str(name) for name in data if name not in self.fields)
            if unknown:
                known = ", ".join(self.fields)
                hint = f"known fields: {known}" if known else "it takes no fields"
                raise serializers.ValidationError(
                    {name: [f"is not a field of this request; {hint}"] for name in unknown}
                )
        return super().to_internal_value(data)
