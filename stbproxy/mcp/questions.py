"""What a server asks its client in the middle of a call: ``sampling/createMessage``,
``elicitation/create``, ``roots/list``, ``ping``. Over HTTP the question comes as an event of
the call's answer stream and the client answers with a POST of its own; over stdio both are
lines. Such a call's answer depends on what the client answered, so:

- **recorded**: the client's answers are noted as they pass (``answered``), and a call's
  stored answer keeps, beside the stream that holds the questions, each question's method,
  id and the client's answer (``recorded``, in the entry's meta under ``asked``);
- **replayed**: the stored stream is played up to each question, which goes to the client
  with its recorded id (another one when that id already waits for an answer in the same
  session), and the rest waits for the client's answer. An answer like the recorded one
  (``_meta`` aside) plays on; another ends the call with a replay miss (JSON-RPC error
  -32010) that names the question, both answers and where they differ: the stored answer
  was made for another answer. In virtual mode (``resend`` given) the call goes to the
  server instead, which asks its question again: its events and answer are passed on as
  they come, never kept (the store keeps the answer made for the recorded one). A client's
  answer a replay waits for never reaches a server.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator, Callable, TypeGuard

from stbproxy.mcp import jsonrpc, sse
from stbproxy.models import Response, StreamedResponse
from stbproxy.recent import Recent

ANSWER_WAIT = 120.0  # seconds a replay waits for the client's answer (a person may be asked)
ANSWERS_KEPT = 1024
REPLAY_MISS = -32010  # traffic.REPLAY_MISS


def asked_in(response: Response) -> list[dict]:
    """The requests a server sent in the middle of a call, as its answer stream carries them."""
    if not sse.is_event_stream(response.header("content-type")):
        return []
    return [message for block, _ in sse.blocks_with_separators(response.body)
            if b'"method"' in block and _is_request(message := sse.message_of(block))]


def _is_request(message: dict | None) -> TypeGuard[dict]:
    return (message is not None and isinstance(message.get("method"), str) and "id" in message
            and "result" not in message and "error" not in message)


def _answer_part(message: dict | None) -> dict | None:
    """What of a client's answer its server reads: its result or error."""
    if message is None:
        return None
    return {name: message[name] for name in ("result", "error") if name in message}


class Questions:
    """The clients' answers seen (for recording) and the replays that wait for one, by server,
    session and the question's id."""

    def __init__(self) -> None:
        self._answers: Recent[dict] = Recent(ANSWERS_KEPT)
        self._waiting: dict[tuple, asyncio.Future] = {}

    def answered(self, server: str, session: str, body: bytes) -> bool:
        """Note a client's answer to a server's question; True when a replay waited for it."""
        message = jsonrpc.answer_of(body)
        if message is None:
            return False
        key = (server, session, json.dumps(message.get("id")))
        waiter = self._waiting.get(key)
        if waiter is not None and not waiter.done():
            waiter.set_result(message)
            return True
        self._answers.put(key, message)
        return False

    def recorded(self, server: str, session: str, asked: list[dict]) -> list[dict]:
        """The questions of a call with the client's answers (None where none was seen)."""
        return [{"method": message["method"], "id": message["id"],
                 "answer": _answer_part(self._answers.get((server, session, json.dumps(message["id"]))))}
                for message in asked]

    def wait(self, server: str, session: str, wanted: Any) -> tuple[tuple, Any]:
        """Where a replay waits for the answer to a question: (its key, the id to send it with)."""
        message_id, n = wanted, 0
        while (server, session, json.dumps(message_id)) in self._waiting:
            n += 1
            message_id = f"stbproxy-{wanted}-{n}"
        key = (server, session, json.dumps(message_id))
        self._waiting[key] = asyncio.get_running_loop().create_future()
        return key, message_id

    async def answer(self, key: tuple) -> dict | None:
        """The client's answer, or None when none came within ANSWER_WAIT."""
        try:
            return await asyncio.wait_for(self._waiting[key], ANSWER_WAIT)
        except asyncio.TimeoutError:
            return None
        finally:
            self._waiting.pop(key, None)


def replayed(response: Response, asked: list, questions: Questions, server: str, session: str,
             call_id: Any, resend: Callable[[], AsyncIterator[bytes]] | None = None) -> StreamedResponse:
    """A stored answer that holds a server's questions, played to the client as it goes
    (``resend``: the server's own events and answer, for a client that answers otherwise)."""
    stream = _Replay(response.body, asked, questions, server, session, call_id, resend)
    return StreamedResponse(response.status, response.headers, b"", response.reason, stream)


class _Replay:
    def __init__(self, body: bytes, asked: list, questions: Questions, server: str, session: str,
                 call_id: Any, resend: Callable[[], AsyncIterator[bytes]] | None) -> None:
        self._body = body
        self._asked = [item for item in asked if isinstance(item, dict)]
        self._questions = questions
        self._where = (server, session)
        self._call_id = call_id
        self._resend = resend

    async def chunks(self) -> AsyncIterator[bytes]:
        recorded = iter(self._asked)
        for block, separator in sse.blocks_with_separators(self._body):
            message = sse.message_of(block) if b'"method"' in block else None
            if not _is_request(message):
                yield block + separator
                continue
            expected = next(recorded, None)
            key, message_id = self._questions.wait(*self._where, message["id"])
            if message_id != message["id"]:  # that id waits for an answer already: another one
                block = sse.with_data(block, json.dumps({**message, "id": message_id}, ensure_ascii=False,
                                                        separators=(",", ":")).encode())
            yield block + separator
            got = await self._questions.answer(key)
            why = _unlike(message["method"], expected, got)
            if why is not None and got is not None and self._resend is not None:
                async for piece in self._resend():  # virtual mode: a miss the server answers
                    yield piece
                return
            if why is not None:
                yield sse.encode([sse.Event(jsonrpc.error_body(self._call_id, REPLAY_MISS, why[0], why[1]))])
                return

    async def aclose(self) -> None:
        return None


def _unlike(method: str, expected: dict | None, got: dict | None) -> tuple[str, dict] | None:
    """Why the client's answer to a replayed question is not the recorded one (the text and
    the error's data), or None when it is."""
    if got is None:
        return (f"stbproxy replay: the client did not answer the server's {method} within {ANSWER_WAIT:g} s",
                {"asked": method})
    answer = _answer_part(got)
    if expected is None or expected.get("answer") is None:
        return None  # the recording did not see the client's answer: nothing to hold it to
    where = _difference(_without_meta(expected["answer"]), _without_meta(answer), "")
    if where is None:
        return None
    return (f"stbproxy replay: no stored answer for this call when the client answers the server's {method} "
            f"so (it answered otherwise when the call was recorded; the error's data says where)",
            {"asked": method, "differs_at": where or "/", "recorded": expected["answer"], "got": answer})


def _without_meta(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_meta(v) for k, v in value.items() if k != "_meta"}
    if isinstance(value, list):
        return [_without_meta(v) for v in value]
    return value


def _difference(left: Any, right: Any, path: str) -> str | None:
    """The JSON pointer of the first place two values differ, or None when they are equal."""
    if isinstance(left, dict) and isinstance(right, dict):
        for name in sorted(left.keys() | right.keys()):
            if name not in left or name not in right:
                return f"{path}/{name}"
            found = _difference(left[name], right[name], f"{path}/{name}")
            if found is not None:
                return found
        return None
    if isinstance(left, list) and isinstance(right, list):
        if len(left) != len(right):
            return path or "/"
        for n, (a, b) in enumerate(zip(left, right)):
            found = _difference(a, b, f"{path}/{n}")
            if found is not None:
                return found
        return None
    return None if left == right else (path or "/")
