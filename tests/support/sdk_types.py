"""Responses checked against the SDK's own pydantic models: every field a model declares
required is present in the raw JSON, at every depth, and the object validates. The
required fields come from the models (`model_fields`), never from a list kept here."""

import types
import typing
from typing import Any

import pydantic


def _variants(annotation: Any) -> list[Any]:
    """The types an annotation allows, with Optional, Union and Annotated unwrapped."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _variants(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [v for arg in typing.get_args(annotation) for v in _variants(arg)]
    return [annotation]


def _model_for(annotation: Any, value: dict[str, Any]) -> type[pydantic.BaseModel] | None:
    """The model among the annotation's variants that `value` is: by its `type` literal
    when several are possible (the SDK's discriminated unions)."""
    models = [
        v
        for v in _variants(annotation)
        if isinstance(v, type) and issubclass(v, pydantic.BaseModel)
    ]
    if len(models) == 1:
        return models[0]
    for model in models:
        field = model.model_fields.get("type")
        if field is not None and value.get("type") in typing.get_args(field.annotation):
            return model
    return None


def missing_required(model: type[pydantic.BaseModel], raw: Any, path: str = "$") -> list[str]:
    """The paths of required fields missing from `raw`, read as `model`."""
    assert isinstance(raw, dict), f"{path} is not an object: {raw!r}"
    missing = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        if key not in raw:
            if field.is_required():
                missing.append(f"{path}.{key}")
            continue
        missing += _missing_in(field.annotation, raw[key], f"{path}.{key}")
    return missing


def _missing_in(annotation: Any, value: Any, path: str) -> list[str]:
    if isinstance(value, dict):
        model = _model_for(annotation, value)
        return missing_required(model, value, path) if model is not None else []
    if isinstance(value, list):
        inner = [
            typing.get_args(v)[0] for v in _variants(annotation) if typing.get_origin(v) is list
        ]
        found = []
        for index, item in enumerate(value):
            for element in inner:
                found += _missing_in(element, item, f"{path}[{index}]")
        return found
    return []


def assert_sdk_shape(annotation: Any, raw: Any) -> None:
    """`raw` holds every required field of `annotation` (a model or a union of models)
    and validates as it."""
    model = _model_for(annotation, raw)
    assert model is not None, f"no SDK model for {raw!r}"
    assert missing_required(model, raw) == [], raw
    pydantic.TypeAdapter(model).validate_python(raw)
