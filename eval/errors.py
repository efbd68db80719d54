"""The exceptions stbeval raises on purpose.

stbeval never imports the proxy side, so it has its own small tree. openai and file
errors are translated into these where they happen; the CLI turns them into messages.
"""


class EvalError(Exception):
    """Root of every error stbeval raises on purpose."""


class InputError(EvalError):
    """An answer, id, query or template file cannot be used; the message says where and why."""


class TemplateError(InputError):
    """A judge template file is malformed."""


class JudgeFatalError(EvalError):
    """The judge cannot judge: none is configured, its endpoint is unreachable, or it
    refuses every call (bad key, unknown model). The run stops; no score is written."""
