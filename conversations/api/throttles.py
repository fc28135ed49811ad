"""The per-user request budgets, defined at the domain level (conversations/throttles.py)
so that /openai/v1/ spends the same ones; named here too, as the settings name them."""

from conversations.throttles import ModelThrottle, UserThrottle

__all__ = ["ModelThrottle", "UserThrottle"]
