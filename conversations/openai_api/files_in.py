"""The files of OpenAI's input parts (file_parts.py) made what their message needs:

- a stored message carries the owner's stored files (`files_stored`): a `file_id` names
  one, and bytes in the request are stored as an upload is (sniffed, deduplicated, within
  the quota), the files this request made taken away again if its message is refused;
- a message kept nowhere (`store: false`) carries its files as the model reads them
  (`files_read`): bytes in the request are sniffed as an upload is and never stored.

Ids are looked up first, in one query, so an unknown one is refused before anything is
stored: another user's file, an unknown id and a malformed one are the same 404. Each
refusal names the part it concerns (`input[0].content[1].image_url`). An `input_image`
must hold an image.
"""

import contextlib
import io
from collections.abc import Iterator
from dataclasses import replace
from uuid import UUID

from django.conf import settings

from accounts.models import User
from conversations import context, selectors, services
from conversations.context import FileInput
from conversations.errors import UNSUPPORTED_FILE_TYPE, ParleyError, ValidationFailed
from conversations.models import StoredFile
from conversations.openai_api.errors import OpenAIError, invalid
from conversations.openai_api.file_parts import FilePart, file_not_found
from conversations.openai_api.ids import file_id
from conversations.openai_api.items_in import InputMessages
from conversations.services import NewMessage


@contextlib.contextmanager
def files_stored(*, user: User, read: InputMessages) -> Iterator[list[NewMessage]]:
    """`read`'s messages, each user message with the ids of the files it carries, for the
    block to store: the files stored inside it go again if the block raises."""
    if not read.files:
        yield read.messages
        return
    owned = _owned(user, read)
    with services.files_inline(owner=user) as inline:
        messages = list(read.messages)
        for index, parts in read.files.items():
            keys: dict[UUID, FilePart] = {}
            for part in parts:
                if part.file_key is not None:
                    file = owned[part.file_key]
                else:
                    with _named(part):
                        file = inline.store(data=part.data, filename=part.filename)
                _image_check(part, file.content_type)
                if file.pk in keys:
                    raise _twice(part, keys[file.pk])
                keys[file.pk] = part
            messages[index] = replace(messages[index], attachments=tuple(keys))
        yield messages


def files_read(*, user: User, read: InputMessages, vision: bool) -> list[NewMessage]:
    """`read`'s messages, each user message with its files as the model reads them
    (images as data URLs when `vision`, else described), nothing stored."""
    if not read.files:
        return read.messages
    owned = _owned(user, read)
    text_chars = context.file_text_chars(settings.PARLEY_CONTEXT_TOKENS)
    messages = list(read.messages)
    for index, parts in read.files.items():
        files: list[FileInput] = []
        for part in parts:
            if part.file_key is not None:
                [found] = selectors.stored_files_input(
                    files=[owned[part.file_key]], vision=vision, text_chars=text_chars
                )
            else:
                staged = services.file_stage(source=io.BytesIO(part.data))
                try:
                    with _named(part):
                        found = selectors.staged_file_input(
                            staged=staged,
                            filename=part.filename,
                            vision=vision,
                            text_chars=text_chars,
                        )
                finally:
                    staged.close()
            _image_check(part, found.content_type)
            files.append(found)
        messages[index] = replace(messages[index], files=tuple(files))
    return messages


def _owned(user: User, read: InputMessages) -> dict[UUID, StoredFile]:
    """The user's files the parts name; a 404 naming the first part whose id is not."""
    named = [
        (key, part)
        for parts in read.files.values()
        for part in parts
        if (key := part.file_key) is not None
    ]
    owned = selectors.files_by_id(user=user, file_ids=[key for key, _ in named])
    for key, part in named:
        if key not in owned:
            raise file_not_found(file_id(key), param=part.source)
    return owned


@contextlib.contextmanager
def _named(part: FilePart) -> Iterator[None]:
    """A refusal of the part's bytes (too large, a type not accepted, too many pixels, past
    the quota) named by the parameter that held them."""
    try:
        yield
    except OpenAIError:
        raise
    except ValidationFailed as refused:
        reason = refused.problems[0].message if refused.problems else refused.message
        raise invalid(f"Invalid '{part.source}': the file {reason}.", param=part.source) from None
    except ParleyError as refused:
        raise OpenAIError(refused.error, refused.message, param=part.source) from None


def _image_check(part: FilePart, content_type: str) -> None:
    if part.image and not content_type.startswith("image/"):
        raise OpenAIError(
            UNSUPPORTED_FILE_TYPE,
            f"'{part.param}' is an input_image but holds no image ({content_type}); send "
            "other files as input_file parts.",
            param=part.source,
        )


def _twice(part: FilePart, first: FilePart) -> OpenAIError:
    return invalid(
        f"Invalid '{part.param}': the same file is already in this message, as '{first.param}'.",
        param=part.source,
    )
