"""Which requests are calls of an LLM API: the one place the proxy and the evaluator learn
the paths of the LLM APIs that agents call.

- ``conversation_api_of``: the APIs an agent's turns are read from (stbeval rebuilds its
  trajectories from them): OpenAI chat completions, OpenAI Responses, Anthropic Messages.
- ``is_openai_compatible``: the OpenAI-compatible endpoints whose clients read an error
  only in OpenAI's shape (the proxy answers their replay misses so).
"""

from __future__ import annotations

from typing import Any

CHAT, RESPONSES, MESSAGES = "chat-completions", "responses", "anthropic-messages"
OPENAI_PATHS = ("/chat/completions", "/completions", "/embeddings", "/responses", "/moderations")


def conversation_api_of(method: str, path: str, body: Any) -> str | None:
    """Which LLM API a request is a turn of (CHAT, RESPONSES or MESSAGES), or None."""
    if method.upper() != "POST":
        return None
    path = path.rstrip("/")
    if path.endswith("/chat/completions"):
        return CHAT
    if path.endswith("/responses") and isinstance(body, dict):
        return RESPONSES
    if (path.endswith("/messages") and isinstance(body, dict) and "model" in body
            and isinstance(body.get("messages"), list)):
        return MESSAGES
    return None


def is_openai_compatible(method: str, path: str) -> bool:
    """A POST to an OpenAI-compatible endpoint (chat completions and the like)."""
    return method == "POST" and path.rstrip("/").endswith(OPENAI_PATHS)
