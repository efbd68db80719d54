"""An unmodified MCP client (the official SDK's), configured only by its environment
(HTTP_PROXY / HTTPS_PROXY, SSL_CERT_FILE), that runs a plan and prints what it got.

    python tests/mcp_demo/client.py '{"url": "http://127.0.0.1:8123/mcp", "steps": [...]}'
    python tests/mcp_demo/client.py '{"stdio": ["python", "server.py", "--stdio"], "steps": [...]}'

Steps: ["tools"], ["call", NAME, ARGUMENTS], ["call", NAME, ARGUMENTS, {"progress": true}] (the
progress the call reported is printed with its result), ["read", URI], ["prompt", NAME, ARGUMENTS],
["until_notified", TOOL, METHOD, SECONDS] (calls TOOL, once a second, until the server has
sent a notification of METHOD outside any request, which reaches the client on the
session's GET stream: the client opens that stream in the background, and a server drops
what it says while none is open).
Each result is printed as JSON (the SDK's model, without None fields); a JSON-RPC error as
{"error": {"code", "message"}}; a client-side failure (a result the client refused) as
{"refused": TEXT}. Nothing waits forever: every request has a read timeout.
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import timedelta

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError

TIMEOUT = timedelta(seconds=20)


class Notes:
    """The notifications a server sent the client by themselves (not answers to a request)."""

    def __init__(self) -> None:
        self.methods: list[str] = []
        self.changed = anyio.Event()

    async def handle(self, message) -> None:
        root = getattr(message, "root", None)
        if root is not None and hasattr(root, "method"):
            self.methods.append(root.method)
            self.changed.set()

    async def until(self, session: ClientSession, tool: str, method: str, seconds: float) -> dict:
        with anyio.move_on_after(seconds):
            while method not in self.methods:
                self.changed = anyio.Event()
                await session.call_tool(tool, {})
                with anyio.move_on_after(1):
                    await self.changed.wait()
        return {"notified": method} if method in self.methods else {"not_notified": method}


async def run(plan: dict) -> list:
    if "stdio" in plan:
        command, *args = plan["stdio"]
        transport = stdio_client(StdioServerParameters(command=command, args=args, env=plan.get("env")))
    else:
        transport = streamablehttp_client(plan["url"], headers=plan.get("headers"))
    out = []
    async with transport as streams:
        read, write = streams[0], streams[1]
        notes = Notes()
        async with ClientSession(read, write, read_timeout_seconds=TIMEOUT, message_handler=notes.handle) as session:
            try:
                init = await session.initialize()
            except McpError as exc:
                return [{"initialize_error": {"code": exc.error.code, "message": exc.error.message}}]
            out.append({"initialized": init.serverInfo.name, "protocol": init.protocolVersion})
            for step in plan["steps"]:
                out.append(await notes.until(session, *step[1:]) if step[0] == "until_notified"
                           else await one(session, step))
    return out


async def one(session: ClientSession, step: list):
    try:
        if step[0] == "tools":
            result = await session.list_tools()
        elif step[0] == "call" and len(step) > 3 and step[3].get("progress"):
            progress: list[float] = []

            async def heard(value: float, total: float | None, message: str | None) -> None:
                progress.append(value)

            result = await session.call_tool(step[1], step[2], progress_callback=heard)
            return {"result": result.model_dump(mode="json", exclude_none=True), "progress": progress}
        elif step[0] == "call":
            result = await session.call_tool(step[1], step[2])
        elif step[0] == "read":
            result = await session.read_resource(step[1])
        elif step[0] == "prompt":
            result = await session.get_prompt(step[1], step[2])
        else:
            raise ValueError(f"unknown step {step[0]}")
    except McpError as exc:
        return {"error": {"code": exc.error.code, "message": exc.error.message}}
    except RuntimeError as exc:  # e.g. structured content that breaks the tool's outputSchema
        return {"refused": str(exc)}
    return result.model_dump(mode="json", exclude_none=True)


def main() -> None:
    plan = json.loads(sys.argv[1])
    try:
        results = anyio.run(run, plan)
    except BaseException as exc:  # anyio wraps failures in groups: say what failed, nothing more
        print(json.dumps({"failed": repr(exc)}))
        sys.exit(1)
    print(json.dumps(results))


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    main()
