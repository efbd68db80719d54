"""StableToolBench's inference pipeline, played again from its own answer files, for tests.

The twelve answers the pipeline wrote (``pipeline_answers_tool_calls/G1_instruction`` in
the shared data, CoT@1, ``tool_calls`` format) hold whole conversations. This module
plays both sides of each again, making the requests the pipeline makes:

- :class:`PipelineLlm` is a handler for tests/fakes/fake_openai.py: it answers a chat
  request with the next assistant message of the answer whose task the request carries;
- :class:`ToolServer` is a loopback HTTP server that answers each tool call with the
  observation the file holds: ``POST /virtual`` as a ToolBench-style server (the proxy's
  ``--toolbench-url``), and ``GET /<tool>/<api>?<args>`` as a RapidAPI-style API;
- :func:`run_query` is the agent for one query: chat-completion requests with the
  growing message list through the openai client (the functions offered as tools,
  ``function_call`` fields dropped as the pipeline drops them), each tool call as
  ``POST /virtual`` to the service URL or RapidAPI-style HTTP through the proxy, until
  ``Finish``; it returns the conversation as the pipeline keeps it (``train_messages``);
- :func:`run_queries` runs queries on several threads, as the pipeline's ``--num_thread``;
- :func:`record` records such a run into one session of a real ``stbproxy serve``.

``python -m tests.pipeline_run FILE`` records the run again and exports its session to
FILE (the fixture ``tests/eval/data/pipeline_session.yaml`` was made so).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx
import openai
import requests

from stbproxy.serve_process import ServeProcess
from stbproxy.stb.catalog import api_key_name, function_name, standardize
from tests.fakes.fake_openai import FakeOpenAI, HttpError, ToolCall
from tests.loopback import LoopbackServer, QuietHandler

GROUP = "G1_instruction"
SESSION = "pipeline-run"
VARIANTS = ("pipeline", "http")
AGENT_MODEL = "gpt-3.5-turbo-16k"
# Secrets the agent sends; none may reach the store or an export.
OPENAI_KEY = "sk-agent-secret-0123456789"
TOOLBENCH_KEY = "tb-secret-0123456789"
RAPIDAPI_KEY = "rapid-secret-0123456789"
MAX_OBSERVATION = 1024  # the pipeline's --max_observation_length


def answers_dir(stb_data: Path) -> Path:
    return stb_data / "pipeline_answers_tool_calls" / GROUP


def query_file(stb_data: Path) -> Path:
    return stb_data / "solvable_queries" / "test_instruction" / f"{GROUP}.json"


@dataclass
class Item:
    """One query of the run: what the pipeline's answer file says about it."""

    qid: str
    query: str
    conversation: list[dict[str, Any]]  # train_messages[-1]
    functions: list[dict[str, Any]]
    apis: dict[str, tuple[str, str, str]]  # function name -> (category, tool, api)

    @property
    def assistant_turns(self) -> list[dict[str, Any]]:
        return [m for m in self.conversation if m["role"] == "assistant"]


@dataclass
class Script:
    items: dict[str, Item] = field(default_factory=dict)

    @classmethod
    def load(cls, stb_data: Path) -> Script:
        queries = {str(q["query_id"]): q for q in json.loads(query_file(stb_data).read_text())}
        script = cls()
        for path in sorted(answers_dir(stb_data).glob("*_CoT@1.json")):
            qid = path.name.partition("_")[0]
            generation = json.loads(path.read_text())["answer_generation"]
            apis = {function_name(a["api_name"], a["tool_name"]): (a["category_name"], a["tool_name"], a["api_name"])
                    for a in queries[qid]["api_list"]}
            script.items[qid] = Item(qid, generation["query"], generation["train_messages"][-1],
                                     generation["function"], apis)
        return script

    def by_task(self, user_message: str) -> Item:
        found = [item for item in self.items.values() if item.conversation[1]["content"] == user_message]
        assert len(found) == 1, f"{len(found)} answers have this task"
        return found[0]

    def observation(self, function: str, args: dict[str, Any]) -> dict[str, Any] | None:
        """The {error, response} object the file shows for this call."""
        wanted = _canonical(args)
        for item in self.items.values():
            results = {m["tool_call_id"]: m["content"] for m in item.conversation if m["role"] == "tool"}
            for turn in item.assistant_turns:
                for call in turn.get("tool_calls") or []:
                    fn = call["function"]
                    if fn["name"] == function and _canonical(json.loads(fn["arguments"])) == wanted:
                        return json.loads(results[call["id"]])
        return None


def _canonical(args: dict[str, Any]) -> str:
    return json.dumps({k: str(v) for k, v in args.items()}, sort_keys=True)


class PipelineLlm:
    """Answers each chat request with the next assistant message of its conversation."""

    def __init__(self, script: Script) -> None:
        self.script = script

    def __call__(self, request: dict[str, Any]) -> Any:
        user = next(m["content"] for m in request["messages"] if m["role"] == "user")
        item = self.script.by_task(user)
        turn = sum(1 for m in request["messages"] if m["role"] == "assistant")
        if turn >= len(item.assistant_turns):
            return HttpError(400, "the conversation in the file has no further turn")
        message = item.assistant_turns[turn]
        calls = message.get("tool_calls") or []
        if not calls:
            return message.get("content") or ""
        return [ToolCall(c["function"]["name"], c["function"]["arguments"], c["id"]) for c in calls]


class _ToolHandler(QuietHandler):
    def do_POST(self) -> None:  # ToolBench-style: {category, tool_name, api_name, tool_input}
        call = self.read_json()
        function = function_name(call["api_name"], call["tool_name"])
        self.owner.calls.append(("virtual", function))
        tool_input = call["tool_input"]  # an object as StableToolBench's server re-packs it, or a JSON string
        args = json.loads(tool_input or "{}") if isinstance(tool_input, str) else tool_input
        found = self.owner.script.observation(function, args)
        document = found or {"error": f"no such call of {function}", "response": ""}
        self.answer(200, json.dumps(document).encode(), "application/json")

    def do_GET(self) -> None:  # RapidAPI-style: /<tool>/<api>?<args>
        parts = urlsplit(self.path)
        tool, api = parts.path.strip("/").split("/", 1)
        function = f"{api}_for_{tool}"
        self.owner.calls.append(("rapidapi", function))
        found = self.owner.script.observation(function, dict(parse_qsl(parts.query)))
        if found is None:
            self.answer(404, b'{"message": "no such call"}', "application/json")
        else:
            self.answer(200, str(found["response"]).encode(), "text/plain; charset=utf-8")


class ToolServer(LoopbackServer):
    """The tools of the run on loopback, answering from the files (see the module docstring)."""

    handler = _ToolHandler

    def __init__(self, script: Script) -> None:
        self.script = script
        self.calls: list[tuple[str, str]] = []
        super().__init__()

    @property
    def url(self) -> str:
        return self.base_url


def run_query(item: Item, *, llm_base_url: str, proxy_url: str | None = None, tools: str = "virtual",
              service_url: str | None = None, tool_base: str | None = None, stream: bool = False,
              tool_proxy: str | None = None) -> list[dict[str, Any]]:
    """The agent for one query (see the module docstring); returns its conversation.
    ``proxy_url``: the proxy its LLM calls (and RapidAPI-style tool calls) go through;
    ``tool_proxy``: the proxy its /virtual calls go through (the transparent way)."""
    http = httpx.Client(proxy=proxy_url, timeout=30) if proxy_url else httpx.Client(timeout=30)
    client = openai.OpenAI(base_url=llm_base_url, api_key=OPENAI_KEY, max_retries=0, http_client=http)
    web = requests.Session()
    web.trust_env = False
    through = proxy_url if tools == "rapidapi" else tool_proxy
    if through:
        web.proxies = {"http": through, "https": through}
    messages: list[dict[str, Any]] = [dict(item.conversation[0]), dict(item.conversation[1])]
    try:
        for _step in range(12):  # the pipeline's single_chain_max_step
            for message in messages:
                message.pop("function_call", None)  # as the pipeline does, on its own history
            message = _complete(client, messages, item.functions, stream)
            messages.append(message)
            calls = message.get("tool_calls") or []
            if not calls or any(c["function"]["name"] == "Finish" for c in calls):
                return messages
            for call in calls:
                observation = _call_tool(web, item, call["function"], tools, service_url, tool_base)
                if len(observation) > MAX_OBSERVATION:
                    observation = observation[:MAX_OBSERVATION] + "..."
                messages.append({"role": "tool", "name": call["function"]["name"], "content": observation,
                                 "tool_call_id": call["id"]})
        return messages
    finally:
        client.close()
        web.close()


def _complete(client: openai.OpenAI, messages: list[dict[str, Any]], functions: list[dict[str, Any]],
              stream: bool) -> dict[str, Any]:
    options = dict(model=AGENT_MODEL, messages=messages, max_tokens=1024, frequency_penalty=0, presence_penalty=0,
                   tools=functions)
    if not stream:
        return client.chat.completions.create(**options).choices[0].message.model_dump()
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    for chunk in client.chat.completions.create(stream=True, **options):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content.append(delta.content or "")
        for part in delta.tool_calls or []:
            slot = calls.setdefault(part.index, {"id": None, "function": {"arguments": "", "name": ""},
                                                 "type": "function"})
            slot["id"] = part.id or slot["id"]
            slot["function"]["name"] += part.function.name or ""
            slot["function"]["arguments"] += part.function.arguments or ""
    return {"content": "".join(content) or None, "refusal": None, "role": "assistant", "annotations": None,
            "audio": None, "function_call": None, "tool_calls": [calls[i] for i in sorted(calls)] or None}


def _call_tool(web: requests.Session, item: Item, fn: dict[str, Any], tools: str, service_url: str | None,
               tool_base: str | None) -> str:
    category, tool, api = item.apis[fn["name"]]
    if tools == "virtual":
        # As the pipeline's rapidapi_wrapper sends them: the category as the query file names it,
        # the standardized tool name and the API's key (change_name(standardize(api_name))).
        payload = {"category": category, "tool_name": standardize(tool), "api_name": api_key_name(api),
                   "tool_input": fn["arguments"], "strip": "truncate", "toolbench_key": TOOLBENCH_KEY}
        reply = web.post(service_url, json=payload, headers={"toolbench_key": TOOLBENCH_KEY}, timeout=30)
        return json.dumps(reply.json())
    host = f"{standardize(tool).replace('_', '-')}.p.rapidapi.com"
    reply = web.get(f"{tool_base}/{standardize(tool)}/{api_key_name(api)}", params=json.loads(fn["arguments"]),
                    headers={"X-RapidAPI-Key": RAPIDAPI_KEY, "X-RapidAPI-Host": host}, timeout=30)
    return json.dumps({"error": "" if reply.ok else f"HTTP {reply.status_code}", "response": reply.text})


def run_queries(script: Script, qids: list[str], *, threads: int = 2,
                **options: Any) -> dict[str, list[dict[str, Any]]]:
    """Each query's conversation, run on ``threads`` threads at once."""
    with ThreadPoolExecutor(threads) as pool:
        done = pool.map(lambda qid: run_query(script.items[qid], **options), qids)
        return dict(zip(qids, done))


@dataclass
class Recording:
    variant: str
    store: Path
    session: str
    histories: dict[str, list[dict[str, Any]]]  # the agent's conversation per query
    tool_calls: list[tuple[str, str]]  # what reached the tool server


def record(script: Script, store: Path, *, variant: str = "pipeline", qids: list[str] | None = None,
           threads: int = 2) -> Recording:
    """Run the queries through a real ``stbproxy serve`` into one session.

    ``pipeline``: as StableToolBench's pipeline runs behind a virtual server: virtual mode,
    the agent's LLM calls passed through (and logged), tool calls as ``POST /virtual`` to
    the proxy, which asks the ToolBench-style tool server on a miss. ``http``: record
    mode, the LLM calls recorded as entries and streamed, tool calls as RapidAPI-style
    HTTP through the proxy.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant is one of {VARIANTS}")
    qids = qids or sorted(script.items)
    with FakeOpenAI(PipelineLlm(script)) as llm, ToolServer(script) as tools:
        if variant == "pipeline":
            # Strict validity: one observation ("simulated 7fe500b236bc") holds "500", which
            # StableToolBench's substring rules would take for a failure.
            args = ["--passthrough", "127.0.0.1", "--validity", "strict", "--toolbench-url", f"{tools.url}/virtual"]
        else:
            args = ["--mode", "record"]
        with ServeProcess(store, "--session", SESSION, "--simulator", "off", *args) as proxy:
            options: dict[str, Any] = {"llm_base_url": llm.base_url, "proxy_url": proxy.url}
            if variant == "pipeline":
                options.update(tools="virtual", service_url=f"{proxy.url}/virtual")
            else:
                options.update(tools="rapidapi", tool_base=tools.url, stream=True)
            histories = run_queries(script, qids, threads=threads, **options)
        assert not llm.errors, llm.errors[0]
        return Recording(variant, store, SESSION, histories, list(tools.calls))


if __name__ == "__main__":  # python -m tests.pipeline_run FILE [pipeline|http]
    import subprocess
    import sys
    import tempfile

    from tests.conftest import STB_DATA

    target = Path(sys.argv[1]).resolve()
    with tempfile.TemporaryDirectory() as folder:
        made = record(Script.load(STB_DATA), Path(folder) / "store",
                      variant=sys.argv[2] if len(sys.argv) > 2 else "pipeline")
        subprocess.run([sys.executable, "-m", "stbproxy", "export", "--session", made.session,
                        "--store", str(made.store), "-o", str(target)], check=True)
