"""The errors a run ends with when the engine itself stops it, worded for the user."""


def attempts_error(code: str, attempts: int) -> dict[str, str]:
    return {
        "code": code,
        "message": f"The run stopped after {attempts} interrupted attempts at the same step.",
    }


def cut_short_error(limit: int) -> dict[str, str]:
    return {
        "code": "max_output_tokens",
        "message": f"The reply reached its limit of {limit} tokens and was cut short. "
        "Raise “Max output tokens” in the conversation's settings for longer replies.",
    }


def history_error(token_budget: int) -> dict[str, str]:
    return {
        "code": "context_length_exceeded",
        "message": f"The conversation does not fit the model's input of {token_budget} "
        "tokens, and this response asked for no truncation; with `truncation: auto` the "
        "oldest turns that do not fit would be dropped.",
    }


def iterations_error(iterations: int) -> dict[str, str]:
    return {
        "code": "max_iterations",
        "message": f"Parley stopped after {iterations} rounds of tool calls in one reply, "
        "the most one reply may take.",
    }
