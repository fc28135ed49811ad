"""The Django admin for moderators: conversations, transcripts (audited), messages, runs,
the audit trail, share links and the usage dashboard; users, groups and API keys, which
share the text guard and whose deletion takes the users' conversations along; tool
servers.

Who sees what: staff with a model's view permission see its metadata; message text
(transcripts, the message admin's content, exports) needs the separate
`conversations.view_transcript` permission, and every reading of it is audited.
"""

from conversations.admin import accounts, conversations, read_only, shares, tool_servers

__all__ = ["accounts", "conversations", "read_only", "shares", "tool_servers"]
