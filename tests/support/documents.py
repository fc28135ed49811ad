"""Helpers for comparing export documents across an import, which gives new ids."""

import copy
from typing import Any


def branch_ids_relabelled(document: dict[str, Any]) -> dict[str, Any]:
    """The document with its branch ids replaced by their order in `branches` (b0, b1,
    ...): two exports of the same tree compare equal whatever ids the rows got."""
    document = copy.deepcopy(document)
    names = {row["id"]: f"b{index}" for index, row in enumerate(document.get("branches", []))}
    for row in document.get("branches", []):
        row["id"] = names[row["id"]]
        row["parent_id"] = names.get(row["parent_id"])
    conversation = document["conversation"]
    if "active_branch_id" in conversation:
        conversation["active_branch_id"] = names.get(conversation["active_branch_id"])
    for message in document["messages"]:
        if "branch_id" in message:
            message["branch_id"] = names.get(message["branch_id"])
    return document


def export_comparable(document: dict[str, Any]) -> dict[str, Any]:
    """An export minus what an import may change, as the format defines it: the ids (a
    conversation's, its messages', the run and conversation they named, the files';
    branches by their order) and the export time."""
    document = branch_ids_relabelled(document)
    del document["exported_at"]
    del document["conversation"]["id"]
    del document["conversation"]["forked_from"]
    for message in document["messages"]:
        del message["id"]
        del message["run_id"]
        # The importing user's own files: the same bytes, under their own ids.
        for attachment in message.get("attachments", []):
            del attachment["id"]
    return document
