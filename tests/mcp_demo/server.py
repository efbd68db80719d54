"""A real MCP server for the tests, built with the official SDK's FastMCP: tools with and
without an outputSchema, one that fails, one that echoes the caller's credentials, one
that tells the session its tool list changed (a message for the session's GET stream), a
resource and a prompt.

    python tests/mcp_demo/server.py --port 8123 [--json] [--stateless] [--events] [--tls CERT KEY]   # at /mcp
    python tests/mcp_demo/server.py --stdio                               # over stdin/stdout

--events keeps every event it sends in memory, with an id, so that a client can resume a
stream with Last-Event-ID. Every call is counted in the file named by --calls (one line per tools/call), so a test
can tell which calls reached the server.
"""

from __future__ import annotations

import argparse
from typing import TypedDict

from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.types import JSONRPCMessage
from pydantic import BaseModel, Field


class Sum(BaseModel):
    total: int
    note: str


class Forecast(TypedDict):
    city: str
    days: int
    summary: str
    high_c: float


class KeptEvents(EventStore):
    """Every event in memory, numbered per server: enough to resume any stream."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, JSONRPCMessage | None]] = []  # (event id, stream id, message)

    async def store_event(self, stream_id: str, message: JSONRPCMessage | None) -> str:
        event_id = f"event-{len(self.events) + 1}"
        self.events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: str, send_callback: EventCallback) -> str | None:
        found = [n for n, (event_id, _, _) in enumerate(self.events) if event_id == last_event_id]
        if not found:
            return None
        stream = self.events[found[0]][1]
        for event_id, stream_id, message in self.events[found[0] + 1:]:
            if stream_id == stream and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream


def build(port: int, json_response: bool, stateless: bool, calls: str | None, events: bool = False) -> FastMCP:
    server = FastMCP("demo", host="127.0.0.1", port=port, json_response=json_response, stateless_http=stateless,
                     log_level="WARNING", event_store=KeptEvents() if events else None)

    def count(name: str) -> None:
        if calls:
            with open(calls, "a", encoding="utf-8") as handle:
                handle.write(name + "\n")

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> Sum:
        count("add")
        return Sum(total=a + b, note=f"{a}+{b}")

    @server.tool(description="The weather forecast for a city.")
    def forecast(city: str, days: int = Field(default=1, ge=1, le=7)) -> Forecast:
        count("forecast")
        return Forecast(city=city, days=days, summary=f"sunny in {city}", high_c=21.5)

    @server.tool(description="Shout a word back.", structured_output=False)
    def shout(word: str) -> str:
        count("shout")
        return word.upper() + "!"

    @server.tool(description="Always fails.")
    def broken(reason: str) -> str:
        count("broken")
        raise ToolError(f"broken on purpose: {reason}")

    @server.tool(description="Tells who called: echoes the caller's credentials, as careless APIs do.",
                 structured_output=False)
    def whoami(ctx: Context) -> str:
        count("whoami")
        request = ctx.request_context.request
        headers = request.headers if request is not None else {}
        return f"you called with authorization={headers.get('authorization')} api-key={headers.get('x-api-key')}"

    @server.tool(description="Says that the tool list changed, on the session's own stream.")
    async def touch_tools(ctx: Context) -> str:
        count("touch_tools")
        await ctx.session.send_tool_list_changed()
        return "told"

    @server.tool(description="Counts to n, reporting its progress.", structured_output=False)
    async def count_to(n: int, ctx: Context) -> str:
        count("count_to")
        for step in range(1, n + 1):
            await ctx.report_progress(step, n)
        return f"counted to {n}"

    @server.resource("demo://info", mime_type="text/plain")
    def info() -> str:
        return "hello from the demo resource"

    @server.prompt()
    def review(code: str) -> str:
        return f"Please review:\n{code}"

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="answer requests with JSON instead of SSE")
    parser.add_argument("--stateless", action="store_true")
    parser.add_argument("--stdio", action="store_true")
    parser.add_argument("--events", action="store_true", help="keep events, so that streams can be resumed")
    parser.add_argument("--calls")
    parser.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"), help="serve HTTPS with this certificate")
    args = parser.parse_args()
    if args.calls:  # a line per start, so that a test sees whether the server was started at all
        with open(args.calls, "a", encoding="utf-8") as handle:
            handle.write("started\n")
    server = build(args.port, args.json, args.stateless, args.calls, args.events)
    if args.stdio:
        server.run(transport="stdio")
        return
    import uvicorn

    tls = {"ssl_certfile": args.tls[0], "ssl_keyfile": args.tls[1]} if args.tls else {}
    uvicorn.run(server.streamable_http_app(), host="127.0.0.1", port=args.port, log_level="warning", **tls)


if __name__ == "__main__":
    main()
