"""Trajectories from recorded traffic: one answer per conversation, many per recording.

Every LLM request of an agent carries its whole conversation so far, and the answer to
its last request holds the final step. So the traffic alone (a cassette, or a proxy
session) tells what each conversation did, even when many ran at once:

- **Grouping.** LLM calls (llm_apis.py) with the same leading system and user messages
  belong to one conversation when each extends the one before: its messages start with
  the earlier request's messages. A request that extends none starts a new conversation
  (the same task run again). Messages are compared by what they say (role, text,
  calls, result ids), not by the extra fields a client echoes back.
- **The trajectory** is read from the conversation's longest request plus its answer,
  with messages.read_steps, into StableToolBench's converted shape (system and user
  nodes blank, as the converter writes them; ``available_tools`` from the request).
- **Tool calls.** Every other recorded request is a tool call of the conversation that
  was waiting for tool results at that moment; when several were, of those that asked for
  the tool the request names (a kind whose requests name their tool, stbcore/tool_calls.py:
  StableToolBench's /virtual, MCP's tools/call), then of the one whose pending calls share the most argument
  values and name parts with the request; on a tie, of all of them. A request of a
  protocol's own housekeeping (a reader says it calls no tool) belongs to none. A call
  whose result never reached the model (the agent stopped right after it) takes the next
  such response recorded after the conversation's last LLM call. With one conversation,
  everything else belongs to it.
- **Ids** (:func:`answers_from_traffic`): a conversation is named by the query its task
  states (queries.py), by the recording's own name when it holds one conversation, or
  by a stable digest of its system and user messages.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping
from urllib.parse import unquote

from stbcore.tool_calls import answer_text, names_match, read_tool_call

from . import llm_apis
from .llm_apis import BadCall, LlmCall
from .messages import calls_of, read_steps, text_of
from .model import FINISH, Answer, Problem, chain, tree_problem
from .queries import QueryIndex, first_words, normalize, task_text

NO_LLM_CALL = "holds no chat-completion call (nor an OpenAI Responses or Anthropic Messages call)"
#: The method of an answer whose recording names none (its ``method`` metadata). Traffic
#: does not say which method the agent ran; the CLI gives such answers the run's name.
UNNAMED_METHOD = "cassette"
_WORDS = re.compile(r"[a-z0-9]+")
DIGEST_NAME = re.compile(r"conv-[0-9a-f]{10}(?:-\d+)?")  # a conversation named by its digest, not a query


@dataclass(frozen=True, slots=True)
class Recorded:
    """One recorded request and its answer, as much as trajectories need of it."""

    index: int
    method: str
    url: str
    path: str
    request_text: str
    status: int
    response_text: str
    request_headers: Mapping[str, str] = field(default_factory=dict)  # names in lower case
    source: str | None = None  # how the proxy answered it, when the recording says (X-Stb-Served/-Source)
    key: str | None = None  # the store key of its answer, when the recording says (X-Stb-Key)


@dataclass
class Conversation:
    """The LLM calls of one conversation, in order, and the tool requests it made."""

    calls: list[LlmCall]
    tool_requests: list[int] = field(default_factory=list)  # indices of its non-LLM requests
    pending: list[Any] = field(default_factory=list)  # tool calls of its latest answer (messages.Call)

    @property
    def final(self) -> LlmCall:
        """The longest request (answered ones first, then the latest)."""
        return max(self.calls, key=lambda c: (len(c.messages), c.reply is not None, c.index))

    def user_message(self) -> str:
        first = _first_user(self.calls[0].messages)
        return text_of(self.calls[0].messages[first]) if first >= 0 else ""

    def digest(self) -> str:
        """``conv-`` and 10 hex digits (DIGEST_NAME): the name of a conversation no query names."""
        head = self.calls[0].messages[:_first_user(self.calls[0].messages) + 1]
        text = "\n".join(f"{m.get('role')}:{normalize(text_of(m))}" for m in head)
        return "conv-" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:10]

    def members(self) -> list[int]:
        """Indices of everything it sent: its LLM calls and its tool requests, in order."""
        return sorted({c.index for c in self.calls} | set(self.tool_requests))


@dataclass
class Traffic:
    recorded: list[Recorded]
    conversations: list[Conversation]
    #: LLM requests or answers that could not be read, with the reason.
    unread: list[str] = field(default_factory=list)
    #: Non-LLM requests no conversation was waiting for.
    unattributed: list[int] = field(default_factory=list)
    #: What a tool answered, read as its kind reads it (an MCP result's text), by request index.
    answers: dict[int, str] = field(default_factory=dict)

    def answer(self, index: int) -> str:
        return self.answers.get(index, self.recorded[index].response_text)


def read_traffic(recorded: Iterable[Recorded]) -> Traffic:
    """Group a recording's LLM calls into conversations and attribute its other requests."""
    traffic = Traffic(list(recorded), [])
    by_head: dict[tuple[Any, ...], list[Conversation]] = {}
    signatures: dict[int, tuple[Any, ...]] = {}
    conversations_of: dict[str, list[dict[str, Any]]] = {}  # Responses ids -> conversation so far
    for item in traffic.recorded:
        body = _json(item.request_text)
        api = llm_apis.api_of(item.method, item.path, body)
        if api is None:
            _attribute(item, traffic, body)
            continue
        try:
            call = llm_apis.read_call(item.index, api, body, item.status, item.response_text, conversations_of)
        except BadCall as exc:
            traffic.unread.append(str(exc))
            continue
        if call.response_id and call.reply is not None:
            conversations_of[call.response_id] = [*call.messages, call.reply]
        signature = tuple(_signature(m) for m in call.messages)
        signatures[call.index] = signature
        head = signature[:_first_user(call.messages) + 1]
        conversation = _continued(by_head.get(head, []), signature, signatures)
        if conversation is None:
            conversation = Conversation([])
            by_head.setdefault(head, []).append(conversation)
            traffic.conversations.append(conversation)
        conversation.calls.append(call)
        conversation.pending = [c for c in calls_of(call.reply or {}) if c.name != FINISH]
    if len(traffic.conversations) == 1 and traffic.unattributed:
        only = traffic.conversations[0]
        only.tool_requests = sorted(set(only.tool_requests) | set(traffic.unattributed))
        traffic.unattributed = []
    return traffic


def trajectory(conversation: Conversation, traffic: Traffic, qid: str, *, query: str | None = None,
               method: str = UNNAMED_METHOD, where: str = "") -> Answer | Problem:
    """The conversation as a StableToolBench answer (converted shape)."""
    final = conversation.final
    if final.error:
        return Problem(qid, final.error, where)
    messages = [*final.messages, *([final.reply] if final.reply is not None else [])]
    first_user = _first_user(messages)
    if first_user < 0:
        return Problem(qid, "no user message to take the query from", where)
    query = query or task_text(text_of(messages[first_user]))
    if not query:
        return Problem(qid, "the user message is empty", where)
    offered_finish = any(t.get("name") == FINISH for t in final.tools)
    late = [traffic.answer(i) for i in conversation.tool_requests if i > final.index]
    read = read_steps(messages[first_user + 1:], late_results=late)
    if read.finish_arguments is not None:
        final_answer = read.finish_arguments
    elif not offered_finish and read.closing_text:
        final_answer = read.closing_text
    else:
        final_answer = ""
    # Blank system and user nodes, as StableToolBench's converter writes them: the judge
    # gets the query on its own, and the system prompt is the same for every answer.
    details = chain([{"role": "system", "message": ""}, {"role": "user", "message": ""}, *read.steps])
    broken = tree_problem(details)
    if broken:
        return Problem(qid, f"broken answer tree: {broken}", where)
    return Answer(query_id=qid, query=query, available_tools=final.tools, method=method,
                  total_steps=len(read.steps) + 2, final_answer=final_answer, answer_details=details,
                  source="cassette", finish_optional=not offered_finish,
                  calls=tuple(answered_by(read.steps, conversation.tool_requests, traffic)))


def answered_by(steps: list[dict[str, Any]], requests: list[int], traffic: Traffic) -> list[dict[str, Any]]:
    """Per tool step (Finish aside), how the recording answered it: the recorded request of
    the conversation whose answer is the step's result, else the next one in order."""
    unused = list(requests)
    out: list[dict[str, Any]] = []
    for step in steps:
        message = step["message"]
        if step["role"] != "tool" or message.get("name") == FINISH:
            continue
        chosen = next((i for i in unused if traffic.answer(i) == message.get("response")), None)
        if chosen is None and unused:
            chosen = unused[0]
        if chosen is None:
            out.append({})
            continue
        unused.remove(chosen)
        item = traffic.recorded[chosen]
        out.append({k: v for k, v in (("source", item.source), ("key", item.key)) if v})
    return out


Named = tuple[str | None, Answer | Problem]  # (group, answer)


@dataclass(frozen=True)
class Naming:
    """What a conversation is called: its query's group and id, and the query's text."""

    conversation: Conversation
    group: str | None
    qid: str
    query: str | None = None


def name_conversations(traffic: Traffic, *, where: str, queries: QueryIndex | None = None,
                       unmatched: str = "skip") -> tuple[list[Naming], list[str]]:
    """Each conversation's name, and notes. With queries, a conversation is named by the
    query its task states; one that matches none is left out with a note (``unmatched=
    "skip"``) or named by its digest (``"digest"``). Without queries, every one is named
    by its digest (a second run of the same task gets ``-2``, and so on)."""
    names: list[Naming] = []
    notes: list[str] = []
    seen: dict[str, int] = {}
    for conversation in traffic.conversations:
        matched = queries.match(conversation.user_message()) if queries is not None else None
        if matched is not None and not isinstance(matched, str):
            names.append(Naming(conversation, matched.group, matched.query_id, matched.text))
            continue
        if matched is not None:
            words = first_words(task_text(conversation.user_message()))
            notes.append(f'{where}: conversation "{words}" {matched}'
                         + ("; left out" if unmatched == "skip" else "; named by its digest"))
            if unmatched == "skip":
                continue
        digest = conversation.digest()
        seen[digest] = seen.get(digest, 0) + 1
        names.append(Naming(conversation, None, digest if seen[digest] == 1 else f"{digest}-{seen[digest]}"))
    return names, notes


def answers_from_traffic(traffic: Traffic, *, where: str, queries: QueryIndex | None = None,
                         single_id: str | None = None,
                         meta: dict[str, Any] | None = None) -> tuple[list[Named], list[str]]:
    """Each conversation's answer with its group and id, and notes on what was left out.

    ``single_id`` names a recording meant to hold one query (a cassette named by its id):
    when it holds one conversation, that conversation keeps the id unless a query
    matches, and the recording's ``meta`` (``query_id``, ``query``, ``method``) applies.
    When a query ran in more than one conversation, the last one is its answer.
    """
    meta = meta or {}
    notes = [f"{where}: {reason}" for reason in traffic.unread]
    if not traffic.conversations:
        reason = NO_LLM_CALL + (f" ({traffic.unread[0]})" if traffic.unread else "")
        if single_id is not None:
            return [(None, Problem(single_id, reason, where))], []
        return [], [f"{where}: {reason}"]
    method = str(meta.get("method", UNNAMED_METHOD))
    if single_id is not None and len(traffic.conversations) == 1:
        found, _ = name_conversations(traffic, where=where, queries=queries, unmatched="digest")
        name = found[0]
        qid = str(meta.get("query_id", name.qid if name.query is not None else single_id))
        answer = trajectory(name.conversation, traffic, qid, query=meta.get("query") or name.query,
                            method=method, where=where)
        return [(name.group, answer)], notes
    names, more = name_conversations(traffic, where=where, queries=queries)
    notes.extend(more)
    answers: dict[tuple[str | None, str], Answer | Problem] = {}
    for name in names:
        if (name.group, name.qid) in answers:
            notes.append(f"{where}: query {name.qid} ran in more than one conversation; the last one is scored")
        answers[(name.group, name.qid)] = trajectory(name.conversation, traffic, name.qid, query=name.query,
                                                     method=method, where=where)
    return [(group, item) for (group, _qid), item in answers.items()], notes


# --- grouping -------------------------------------------------------------------------

def _continued(candidates: list[Conversation], signature: tuple[Any, ...],
               signatures: dict[int, tuple[Any, ...]]) -> Conversation | None:
    """The conversation a request continues: its latest request is a prefix of this one.
    Among several (the same task running twice), the one whose answer comes next."""
    best: tuple[int, int, Conversation] | None = None
    for conversation in candidates:
        last = conversation.calls[-1]
        before = signatures[last.index]
        if len(before) > len(signature) or signature[:len(before)] != before:
            continue
        answered = int(last.reply is not None and len(signature) > len(before)
                       and signature[len(before)] == _signature(last.reply))
        rank = (answered, last.index)
        if best is None or rank > best[:2]:
            best = (*rank, conversation)
    return best[2] if best else None


def _signature(message: dict[str, Any]) -> tuple[Any, ...]:
    role = message.get("role")
    return (role, text_of(message), tuple((c.id, c.name, c.arguments) for c in calls_of(message)),
            message.get("tool_call_id") or None, message.get("name") if role == "function" else None)


def _first_user(messages: list[dict[str, Any]]) -> int:
    return next((i for i, m in enumerate(messages) if m.get("role") == "user"), -1)


# --- tool requests --------------------------------------------------------------------

def _attribute(item: Recorded, traffic: Traffic, body: Any) -> None:
    wire = read_tool_call(item.method, item.path, body, item.request_headers)
    if wire is not None and wire.name is None:
        return  # the protocol's own housekeeping: no step of any trajectory
    if wire is not None:
        traffic.answers[item.index] = answer_text(wire, item.response_text)
    waiting = [c for c in traffic.conversations if c.pending]
    if not waiting:
        traffic.unattributed.append(item.index)
        return
    tool = wire.name if wire is not None else None  # a request of a tool protocol names its tool
    if tool is not None and len(waiting) > 1:
        # The request names its tool: the conversations that asked for that tool.
        waiting = [c for c in waiting if any(names_match(call.name, tool) for call in c.pending)] or waiting
    if len(waiting) > 1:
        text = (unquote(item.url) + " " + item.request_text).lower()
        scores = [max(_overlap(call, text) for call in c.pending) for c in waiting]
        top = max(scores)
        waiting = [c for c, score in zip(waiting, scores) if score == top]
    for conversation in waiting:
        conversation.tool_requests.append(item.index)


def _overlap(call: Any, text: str) -> int:
    """How many of a call's argument values and name parts a request's text holds."""
    values: list[str] = []
    _leaves(_json(call.arguments), values)
    words = [w for w in _WORDS.findall(call.name.lower()) if len(w) > 2 and w != "for"]
    return sum(1 for v in values if len(v) > 1 and v.lower() in text) + sum(1 for w in words if w in text)


def _leaves(value: Any, out: list[str]) -> None:
    if isinstance(value, dict):
        for v in value.values():
            _leaves(v, out)
    elif isinstance(value, list):
        for v in value:
            _leaves(v, out)
    elif value is not None:
        out.append(value if isinstance(value, str) else json.dumps(value))


def _json(text: str) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None
