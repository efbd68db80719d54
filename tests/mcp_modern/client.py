"""The official SDK 2.x client in the stateless era (2026-07-28), configured only by its
environment (HTTP_PROXY / HTTPS_PROXY, SSL_CERT_FILE), running a plan as the 1.x client
of tests/mcp_demo does and printing what it got.

    python client.py '{"url": "...", "mode": "2026-07-28", "steps": [["tools"], ["call", "add", {...}]]}'

The step ["listen", NAME, ARGUMENTS] opens a subscriptions/listen stream for tool list
changes, calls the tool, and gives the first event the stream brought (or a timeout).
"""

from __future__ import annotations

import asyncio
import json
import sys

from mcp import Client
from mcp.shared.exceptions import MCPError


async def run(plan: dict) -> list:
    out = []
    async with Client(plan["url"], mode=plan.get("mode", "2026-07-28"), read_timeout_seconds=20, cache=None) as client:
        out.append({"protocol": client.protocol_version})
        for step in plan["steps"]:
            try:
                if step[0] == "tools":
                    result = await client.list_tools()
                elif step[0] == "call":
                    result = await client.call_tool(step[1], step[2])
                elif step[0] == "read":
                    result = await client.read_resource(step[1])
                elif step[0] == "prompt":
                    result = await client.get_prompt(step[1], step[2])
                elif step[0] == "listen":
                    out.append(await listened(client, step[1], step[2]))
                    continue
                else:
                    raise ValueError(step[0])
            except MCPError as exc:
                out.append({"error": {"code": exc.error.code, "message": exc.error.message}})
                continue
            out.append(result.model_dump(mode="json", exclude_none=True))
    return out


async def listened(client: Client, name: str, arguments: dict) -> dict:
    async with client.listen(tools_list_changed=True) as subscription:
        await client.call_tool(name, arguments)
        try:
            event = await asyncio.wait_for(subscription.__aiter__().__anext__(), 10)
        except (asyncio.TimeoutError, StopAsyncIteration) as exc:
            return {"no_event": type(exc).__name__}
    return {"event": type(event).__name__}


if __name__ == "__main__":
    try:
        print(json.dumps(asyncio.run(asyncio.wait_for(run(json.loads(sys.argv[1])), 60))))
    except BaseException as exc:
        print(json.dumps({"failed": repr(exc)}))
        sys.exit(1)
