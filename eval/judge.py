"""The LLM judge: forced function calls to any OpenAI-compatible endpoint, logged.

This is the only module that imports openai, and only when a call is really made: a
run served wholly from the log neither loads it nor needs a key. Each judgment is one chat completion with
one user prompt and a forced call of the judge function; its label is read from the
call's arguments (or, for servers that ignore forcing, from a JSON object in the text).
A reply without a valid label is asked again, then recorded as *unscored*: it is never
turned into a label, and neither is a call that failed alone (a timeout, an HTTP error).
A judge that cannot judge at all (none configured, its endpoint unreachable after the
client's retries, every call refused) stops the run with JudgeFatalError naming the
endpoint: a run that could not judge has no score. Every call lands in the
:class:`~stbeval.judgelog.JudgeLog`, and a judgment already in the log is returned
without calling anyone.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from .errors import JudgeFatalError
from .judgelog import JudgeLog
from .prompts import CHECK_ANSWER, CHECK_TASK, FUNCTIONS, PARSE_ANSWER, SELECT_BETTER, Prompts

DEFAULT_MODEL = "gpt-4-turbo"
OPENAI_DEFAULT_URL = "https://api.openai.com/v1"
_JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


@dataclass(frozen=True, slots=True)
class JudgeSettings:
    model: str = DEFAULT_MODEL
    temperature: float | None = 0.2  # None: not sent (an evaluator configuration without one)
    base_url: str | None = None  # None: OPENAI_BASE_URL, else OpenAI's own
    api_key: str | None = None  # None: OPENAI_API_KEY
    timeout: float = 60.0
    max_retries: int = 2  # transport retries, done by the openai client
    parse_retries: int = 2  # further attempts after an unparseable reply
    max_tokens: int | None = None
    retry_unscored: bool = False  # ask again where the log says unscored
    #: Further fields of every request (an evaluator configuration's other completions_kwargs).
    request: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Verdict:
    label: Any  # None unless status == "ok"
    reason: str
    status: str  # "ok", "unscored" (no valid label), "error" (no reply)
    reused: bool = False


@dataclass
class JudgeStats:
    calls: int = 0  # HTTP requests made
    reused: int = 0  # judgments taken from the log
    judged: int = 0  # judgments made now
    unscored: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    logged_prompt_tokens: int = 0  # tokens of the re-used judgments, paid by an earlier run
    logged_completion_tokens: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def as_dict(self) -> dict[str, int]:
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}


class Judge:
    def __init__(self, settings: JudgeSettings, prompts: Prompts, log: JudgeLog, *, client: Any = None) -> None:
        self.settings = settings
        self.prompts = prompts
        self.log = log
        self.stats = JudgeStats()
        self._client = client
        self._client_lock = threading.Lock()

    # -- the four judge functions ------------------------------------------------------

    def check_answer_status(self, query: str, answer: str, *, qid: str, round: int) -> Verdict:
        return self.ask(CHECK_ANSWER, {"query": query, "answer": answer}, qid=qid, round=round)

    def parse_answer_status(self, query: str, answer: str, *, qid: str, round: int) -> Verdict:
        return self.ask(PARSE_ANSWER, {"query": query, "answer": answer}, qid=qid, round=round)

    def check_task_solvable(self, task: str, *, qid: str, model: str | None = None) -> Verdict:
        return self.ask(CHECK_TASK, {"task": task}, qid=qid, round=0, model=model)

    def select_better_answer(self, query: str, answer_0: str, answer_1: str, *, qid: str, round: int) -> Verdict:
        return self.ask(SELECT_BETTER, {"query": query, "answer_0": answer_0, "answer_1": answer_1},
                        qid=qid, round=round)

    # -- one judgment --------------------------------------------------------------------

    def ask(self, name: str, fields: Mapping[str, str], *, qid: str, round: int, model: str | None = None) -> Verdict:
        """One judgment, from the log when it is there, else from the endpoint."""
        fn = FUNCTIONS[name]
        model = model or self.settings.model
        prompt = self.prompts.render(name, fields)
        tool = self.prompts.schema(name)
        prompt_digest = hashlib.sha256(prompt.encode("utf-8")).hexdigest()
        # The round is part of the key: rounds are independent samples of the judge.
        keyed: dict[str, Any] = {"fn": name, "model": model, "temperature": self.settings.temperature,
                                 "prompt": prompt_digest, "schema": tool, "round": round}
        # Fields that change the reply too; absent ones leave older logs' keys as they were.
        if self.settings.max_tokens:
            keyed["max_tokens"] = self.settings.max_tokens
        if self.settings.request:
            keyed["request"] = dict(self.settings.request)
        key = _digest(keyed)

        logged = self.log.get(key)
        if logged is not None and not (self.settings.retry_unscored and logged["status"] == "unscored"):
            with self.stats._lock:
                self.stats.reused += 1
                self.stats.logged_prompt_tokens += logged.get("prompt_tokens") or 0
                self.stats.logged_completion_tokens += logged.get("completion_tokens") or 0
            return Verdict(logged.get("label"), logged.get("reason") or "", logged["status"], reused=True)

        record: dict[str, Any] = {"key": key, "fn": name, "qid": qid, "round": round, "model": model,
                                  "temperature": self.settings.temperature, "prompt_sha256": prompt_digest}
        rejected: list[str] = []
        tokens = [0, 0]
        started = time.monotonic()
        for _attempt in range(1 + max(0, self.settings.parse_retries)):
            try:
                raw = self._complete(model, prompt, tool)
            except _CallFailed as exc:
                reason = f"judge call failed: {exc}"
                self._finish(record, rejected, tokens, started, status="error", label=None, reason=reason, raw="")
                return Verdict(None, reason, "error")
            used = _usage(raw)
            tokens[0] += used[0]
            tokens[1] += used[1]
            label, reason = parse_reply(raw, fn)
            if label is not None:
                self._finish(record, rejected, tokens, started, status="ok", label=label, reason=reason, raw=raw)
                return Verdict(label, reason, "ok")
            rejected.append(raw)
        reason = f"no valid {fn.label_field} in {len(rejected)} replies"
        self._finish(record, rejected[:-1], tokens, started, status="unscored", label=None, reason=reason,
                     raw=rejected[-1] if rejected else "")
        return Verdict(None, reason, "unscored")

    def _finish(self, record: dict[str, Any], rejected: list[str], tokens: list[int], started: float, *,
                status: str, label: Any, reason: str, raw: str) -> None:
        record.update(status=status, label=label, reason=reason, raw=raw, rejected=rejected,
                      prompt_tokens=tokens[0], completion_tokens=tokens[1],
                      seconds=round(time.monotonic() - started, 3), at=time.time())
        with self.stats._lock:
            self.stats.judged += 1
            self.stats.prompt_tokens += tokens[0]
            self.stats.completion_tokens += tokens[1]
            self.stats.unscored += status == "unscored"
            self.stats.errors += status == "error"
        self.log.write(record)

    def _complete(self, model: str, prompt: str, tool: dict[str, Any]) -> str:
        """The raw body of one forced-call completion."""
        kwargs: dict[str, Any] = {
            **self.settings.request,
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "tools": [{"type": "function", "function": tool}],
            "tool_choice": {"type": "function", "function": {"name": tool["name"]}},
        }
        if self.settings.temperature is not None:
            kwargs["temperature"] = self.settings.temperature
        if self.settings.max_tokens:
            kwargs["max_tokens"] = self.settings.max_tokens
        import openai

        with self.stats._lock:
            self.stats.calls += 1
        try:
            response = self.client.chat.completions.with_raw_response.create(**kwargs)
        except (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError) as exc:
            # Every later call would fail the same way: stop instead of logging N errors.
            raise JudgeFatalError(f"the judge at {self.endpoint} refused the call: {_describe(exc)}") from exc
        except openai.APITimeoutError as exc:  # one slow call: unscored, the run goes on
            raise _CallFailed(_describe(exc)) from exc
        except openai.APIConnectionError as exc:  # nobody answers at all: no call can succeed
            raise JudgeFatalError(f"the judge at {self.endpoint} cannot be reached: {_describe(exc)}") from exc
        except openai.OpenAIError as exc:  # other statuses: this call failed, the run goes on
            raise _CallFailed(_describe(exc)) from exc
        return response.http_response.text

    @property
    def endpoint(self) -> str:
        """The URL judge calls go to (named in every error about them)."""
        return self.settings.base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_DEFAULT_URL

    @property
    def client(self) -> Any:
        # Built on first use, so a run served wholly from the log needs no key or network.
        with self._client_lock:
            if self._client is None:
                s = self.settings
                configured = (s.base_url or os.environ.get("OPENAI_BASE_URL")
                              or s.api_key or os.environ.get("OPENAI_API_KEY"))
                if not configured:
                    raise JudgeFatalError("no judge is configured: set OPENAI_BASE_URL and OPENAI_API_KEY (or "
                                          "--base-url and --api-key) for an OpenAI-compatible endpoint "
                                          f"(without them calls would go to {OPENAI_DEFAULT_URL} with no key)")
                import openai

                self._client = openai.OpenAI(
                    base_url=s.base_url or os.environ.get("OPENAI_BASE_URL") or None,
                    api_key=s.api_key or os.environ.get("OPENAI_API_KEY") or "not-set",
                    timeout=s.timeout,
                    max_retries=s.max_retries,
                )
            return self._client

    def close(self) -> None:
        if self._client is not None and hasattr(self._client, "close"):
            self._client.close()


def unknown_request_fields(fields: Mapping[str, Any]) -> list[str]:
    """The names in ``fields`` that the openai client's chat completion call does not take
    (checked before a run, so a configuration's typo is not a failure of every call)."""
    import inspect

    from openai.resources.chat.completions import Completions

    known = inspect.signature(Completions.create).parameters
    return [name for name in fields if name not in known]


class _CallFailed(Exception):
    """A judge call that got no usable HTTP answer; the message describes the failure."""


def parse_reply(raw: str, fn: Any) -> tuple[Any, str]:
    """(label, reason) from a raw completion body; label None when there is no valid one."""
    try:
        body = json.loads(raw)
        message = body["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None, ""
    if not isinstance(message, dict):
        return None, ""
    content = message.get("content") if isinstance(message.get("content"), str) else ""
    candidates: list[Any] = []
    for call in message.get("tool_calls") or []:
        function = (call or {}).get("function") or {}
        if function.get("name") in (fn.name, None, ""):
            candidates.append(function.get("arguments"))
    if message.get("function_call"):
        candidates.append(message["function_call"].get("arguments"))
    found = _JSON_OBJECT.search(content or "")
    if found:
        candidates.append(found.group(0))
    for arguments in candidates:
        args = _as_object(arguments)
        if args is None:
            continue
        label = normalize_label(args.get(fn.label_field), fn.labels)
        if label is not None:
            reason = args.get("reason") or args.get("content") or content or ""
            return label, str(reason)
    return None, ""


def normalize_label(value: Any, labels: tuple[Any, ...]) -> Any:
    """The canonical label for a judge's value, or None (``"solved"``, ``1.0``, ``"1"``)."""
    if all(isinstance(x, int) for x in labels):
        if isinstance(value, bool):
            return None
        if isinstance(value, (int, float)) and float(value).is_integer() and int(value) in labels:
            return int(value)
        if isinstance(value, str) and value.strip().isdigit() and int(value.strip()) in labels:
            return int(value.strip())
        return None
    if not isinstance(value, str):
        return None
    text = value.strip().rsplit(".", 1)[-1].lower()  # "AnswerStatus.Solved" too
    for label in labels:
        if text == str(label).lower():
            return label
    return None


def _as_object(arguments: Any) -> dict[str, Any] | None:
    if isinstance(arguments, dict):
        return arguments
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None
    return None


def _usage(raw: str) -> tuple[int, int]:
    try:
        usage = json.loads(raw).get("usage") or {}
        return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    except (ValueError, AttributeError, TypeError):
        return 0, 0


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def _describe(exc: BaseException) -> str:
    status = getattr(exc, "status_code", None)
    text = str(exc).splitlines()[0] if str(exc) else ""
    kind = type(exc).__name__
    return f"{kind} (HTTP {status}): {text}"[:300] if status else f"{kind}: {text}"[:300]
