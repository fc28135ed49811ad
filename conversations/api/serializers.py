"""Request and response shapes. Input serializers check types (DRF); the services check
everything else (lengths, known tools, metadata limits) so every door refuses the same
things. Output serializers document the dicts of conversations/serializers.py and the views."""

from typing import Any

from rest_framework import serializers

from conversations import validation
from conversations.api.organising_serializers import OrganisedOut, OrganisingIn
from conversations.api.strict import (
    StrictBooleanField,
    StrictCharField,
    StrictChoiceField,
    StrictFloatField,
    StrictIntegerField,
    StrictSerializer,
    StrictUUIDField,
)
from conversations.models import MessageKind, MessageRole, RunStatus


def _text(**kwargs: Any) -> StrictCharField:
    """A string kept exactly as sent (DRF would strip it by default)."""
    return StrictCharField(trim_whitespace=False, **kwargs)


# --- input -----------------------------------------------------------------------------


class ConversationIn(StrictSerializer):
    title = _text(required=False, allow_blank=True, max_length=validation.TITLE_MAX)
    system_prompt = _text(required=False, allow_blank=True)
    model = _text(required=False, allow_blank=True, max_length=validation.MODEL_MAX)
    tools = serializers.ListField(child=StrictCharField(), required=False)
    metadata = serializers.DictField(
        child=_text(allow_blank=True, max_length=validation.METADATA_VALUE_MAX),
        required=False,
        help_text=f"At most {validation.METADATA_MAX_KEYS} keys of at most "
        f"{validation.METADATA_KEY_MAX} characters; string values.",
    )
    temperature = StrictFloatField(
        required=False,
        allow_null=True,
        help_text="0 to 2; null for the server's default (PARLEY_DEFAULT_TEMPERATURE).",
    )
    max_output_tokens = StrictIntegerField(
        required=False,
        allow_null=True,
        help_text="The most tokens one reply may use, 1 up to the server's cap "
        "(PARLEY_MAX_OUTPUT_TOKENS); null for the server's default "
        "(PARLEY_DEFAULT_MAX_OUTPUT_TOKENS). A reply that reaches it ends the run as "
        "`incomplete`.",
    )
    vision = StrictBooleanField(
        required=False,
        help_text="Whether the model takes images: attached images are sent to it as image "
        "parts, or else named in words (`[image: name, WxH]`). Default true.",
    )


class ConversationUpdateIn(ConversationIn, OrganisingIn):
    archived = StrictBooleanField(required=False)
    active_branch_id = StrictUUIDField(
        required=False,
        help_text="Show this branch (one of `branches/`): the messages list and new "
        "messages follow its path. 409 while a reply is being generated.",
    )


class ContentIn(StrictSerializer):
    content = _text(help_text="The message text (Markdown).")


def _client_id() -> StrictCharField:
    return _text(
        required=False,
        allow_blank=True,
        max_length=100,
        help_text="Optional idempotency id: a repeat with the same id starts no second run.",
    )


class MessageIn(ContentIn):
    content = _text(
        required=False,
        allow_blank=True,
        default="",
        help_text="The message text (Markdown); may be empty when files are attached.",
    )
    client_id = _client_id()
    attachments = serializers.ListField(
        child=StrictCharField(),
        required=False,
        help_text="Ids of your files (`files/`) the message carries, in order: distinct, "
        "at most PARLEY_FILE_MAX_PER_MESSAGE (default 10). An id that is not one of your "
        "files answers 404.",
    )


class MessageCreateIn(MessageIn):
    branch_id = StrictUUIDField(
        required=False,
        help_text="The branch to write on (default: the active one); it becomes active.",
    )


class RegenerateIn(StrictSerializer):
    client_id = _client_id()


class DraftIn(StrictSerializer):
    draft = _text(allow_blank=True)


class ForkIn(StrictSerializer):
    at_seq = StrictIntegerField(min_value=1, help_text="Copy messages 1..at_seq.")
    branch_id = StrictUUIDField(
        required=False, help_text="Whose path to copy (default: the active branch)."
    )


class ChatIn(StrictSerializer):
    message = _text()
    conversation_id = StrictUUIDField(
        required=False,
        allow_null=True,
        help_text="Omit to start a new conversation; pass the returned id to continue it.",
    )


class StatelessMessageIn(StrictSerializer):
    role = StrictChoiceField(choices=["system", "user", "assistant"])
    content = _text(allow_blank=True)


class StatelessChatIn(StrictSerializer):
    state = StrictCharField(
        required=False,
        allow_blank=True,
        allow_null=True,
        help_text="The `state` of the previous answer; omit to start.",
    )
    system = _text(required=False, allow_blank=True, help_text="Preamble, never stored.")
    messages = StatelessMessageIn(
        many=True,
        allow_empty=False,
        help_text="Only system messages (after some history): context events, added to "
        "the state with no model call; the answer's `reply` is then null.",
    )
    tools = serializers.ListField(
        child=StrictCharField(),
        required=False,
        help_text="The tools the model may call, as a conversation's `tools` (tool "
        "servers' among them); omitted: those a new conversation has.",
    )


class NoFieldsIn(StrictSerializer):
    """A request that takes no fields: anything sent is an unknown field."""


# --- output ----------------------------------------------------------------------------


class ToolCallOut(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    arguments = serializers.CharField(help_text="JSON text, exactly as the model sent it.")


class AlternativesOut(serializers.Serializer):
    index = serializers.IntegerField(
        min_value=0, help_text="This message's place among them, from 0: draw `index + 1`."
    )
    count = serializers.IntegerField(min_value=2)
    branch_ids = serializers.ListField(
        child=serializers.UUIDField(),
        help_text="The branch showing each version, in order; switch to one with `PATCH` "
        "`active_branch_id`.",
    )


class AttachmentOut(serializers.Serializer):
    id = serializers.UUIDField(help_text="The file's id (`files/{id}/content` has its bytes).")
    filename = serializers.CharField()
    content_type = serializers.CharField()
    size = serializers.IntegerField(min_value=0)


class MessageOut(serializers.Serializer):
    id = serializers.UUIDField()
    conversation_id = serializers.UUIDField()
    branch_id = serializers.UUIDField(help_text="The branch the message was written on.")
    seq = serializers.IntegerField(min_value=1, help_text="Its place along the path.")
    role = serializers.ChoiceField(choices=MessageRole.choices)
    kind = serializers.ChoiceField(choices=MessageKind.choices)
    content = serializers.CharField()
    reasoning = serializers.CharField(
        help_text="What a reasoning model thought before answering; empty when none. "
        "Never sent back to the model."
    )
    reasoning_ms = serializers.IntegerField(
        allow_null=True, help_text="How long it thought, in milliseconds."
    )
    tool_calls = ToolCallOut(many=True)
    tool_call_id = serializers.CharField(allow_null=True)
    name = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()
    run_id = serializers.UUIDField(allow_null=True)
    usage = serializers.JSONField(allow_null=True)
    provider_payload = serializers.JSONField(allow_null=True)
    attachments = AttachmentOut(many=True, help_text="The files in the message, in order.")
    alternatives = AlternativesOut(
        allow_null=True,
        help_text="Where an edit or a regeneration made other versions of this message: "
        "which of them this is. Null where there are none.",
    )


class RunErrorOut(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()


class RunOut(serializers.Serializer):
    id = serializers.UUIDField()
    conversation_id = serializers.UUIDField()
    branch_id = serializers.UUIDField(
        allow_null=True, help_text="The branch the run writes on (null for older runs)."
    )
    status = serializers.ChoiceField(choices=RunStatus.choices)
    model = serializers.CharField()
    iterations = serializers.IntegerField()
    usage = serializers.DictField()
    error = RunErrorOut(allow_null=True)
    trigger_message_id = serializers.UUIDField(allow_null=True)
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    cancel_requested_at = serializers.DateTimeField(allow_null=True)


class ConversationOut(OrganisedOut):
    id = serializers.UUIDField()
    title = serializers.CharField()
    system_prompt = serializers.CharField()
    model = serializers.CharField()
    tools = serializers.ListField(child=serializers.CharField())
    metadata = serializers.DictField(child=serializers.CharField())
    draft = serializers.CharField()
    draft_edited = serializers.BooleanField()
    message_count = serializers.IntegerField()
    archived = serializers.BooleanField()
    archived_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    last_activity_at = serializers.DateTimeField()
    forked_from = serializers.UUIDField(allow_null=True)
    forked_at_seq = serializers.IntegerField(allow_null=True)
    temperature = serializers.FloatField(allow_null=True)
    max_output_tokens = serializers.IntegerField(allow_null=True)
    vision = serializers.BooleanField(help_text="Whether the model takes images.")
    active_branch_id = serializers.UUIDField(
        help_text="The branch shown: its path is what `messages/` lists by default."
    )
    branch_count = serializers.IntegerField(
        min_value=1, help_text="1 until the first edit or regeneration."
    )


class ConversationDetailOut(ConversationOut):
    active_run = RunOut(allow_null=True, help_text="The run in progress, if any.")


class MessageCreatedOut(serializers.Serializer):
    message = MessageOut()
    run = RunOut()


class BranchOut(serializers.Serializer):
    id = serializers.UUIDField()
    parent_id = serializers.UUIDField(allow_null=True, help_text="Null for the root branch.")
    fork_seq = serializers.IntegerField(
        min_value=0, help_text="How many messages of the parent's path it shares."
    )
    created_at = serializers.DateTimeField()
    message_count = serializers.IntegerField(
        min_value=0, help_text="The length of its path, shared messages included."
    )


class BranchStartedOut(serializers.Serializer):
    branch = BranchOut(help_text="The new branch, now active.")
    message = MessageOut(
        allow_null=True,
        help_text="The edited message, first on the new branch; null for a regeneration.",
    )
    run = RunOut(help_text="The run answering on the new branch.")


class DraftOut(serializers.Serializer):
    draft = serializers.CharField()
    draft_edited = serializers.BooleanField()
    changed = serializers.BooleanField(help_text="False when the draft was already this text.")


class SearchHitOut(serializers.Serializer):
    conversation_id = serializers.UUIDField()
    conversation_title = serializers.CharField()
    message_id = serializers.UUIDField()
    seq = serializers.IntegerField()
    role = serializers.ChoiceField(choices=MessageRole.choices)
    created_at = serializers.DateTimeField()
    snippet = serializers.CharField(help_text="Excerpt with each match in **bold**.")
    rank = serializers.FloatField(allow_null=True, help_text="Relevance (PostgreSQL only).")


class ChatOut(serializers.Serializer):
    conversation_id = serializers.UUIDField()
    run_id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=RunStatus.choices)
    reply = serializers.CharField(
        allow_null=True, help_text="The assistant's final text; null while the run goes on."
    )
    run = RunOut()
    events_url = serializers.CharField(help_text="Follow the run here (Server-Sent Events).")


class StateResetOut(serializers.Serializer):
    reason = serializers.ChoiceField(
        choices=[
            "invalid_signature",
            "invalid_json",
            "unsupported_version",
            "provider_mismatch",
            "corrupted_messages",
        ]
    )
    message = serializers.CharField()


class StatelessChatOut(serializers.Serializer):
    reply = serializers.CharField(
        allow_null=True, help_text="null when the request only added context events."
    )
    state = serializers.CharField(help_text="Opaque; send it with the next call.")
    status = serializers.ChoiceField(choices=["completed", "incomplete"])
    draft = serializers.CharField(
        allow_blank=True,
        help_text="The working draft the state carries: what `update_draft` last wrote, "
        "sent to the model at the end of every call's input. Empty when there is none.",
    )
    usage = serializers.DictField(child=serializers.IntegerField())
    error = RunErrorOut(
        allow_null=True,
        help_text="Why an incomplete reply stopped (the token limit, the most rounds of "
        "tool calls one reply may take); null otherwise.",
    )
    state_reset = StateResetOut(
        required=False, help_text="Present when the given state could not be used."
    )


class ToolOut(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    parameters = serializers.DictField(help_text="JSON Schema of the arguments.")
    mutating = serializers.BooleanField()
    server = serializers.CharField(
        allow_null=True,
        help_text="The tool server it belongs to (its name is `<server>__<tool>`); null "
        "for a built-in.",
    )


def page_of(item: type[serializers.Serializer], name: str) -> type[serializers.Serializer]:
    """A `{"results": [...], "next": url|null}` page of `item`, for the schema."""
    return type(
        name,
        (serializers.Serializer,),
        {
            "results": item(many=True),
            "next": serializers.URLField(allow_null=True),
        },
    )


ConversationPage = page_of(ConversationOut, "ConversationPage")
MessagePage = page_of(MessageOut, "MessagePage")
BranchPage = page_of(BranchOut, "BranchPage")
SearchPage = page_of(SearchHitOut, "SearchPage")
ToolPage = page_of(ToolOut, "ToolPage")
