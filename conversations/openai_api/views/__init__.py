"""The views of /openai/v1/: conversations, their items, models."""
