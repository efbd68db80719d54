"""A real MCP server of the stateless era (2026-07-28), built with the official SDK 2.x
(run by the venv tests/mcp_modern/__init__.py makes: SDK 2.x cannot share one with
mitmproxy 11).

    python server.py --port 8124 [--json]
"""

from __future__ import annotations

import argparse

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel


class Sum(BaseModel):
    total: int
    note: str


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--calls")
    args = parser.parse_args()
    server = MCPServer("modern", version="1.0", log_level="WARNING")

    def count(name: str) -> None:
        if args.calls:
            with open(args.calls, "a", encoding="utf-8") as handle:
                handle.write(name + "\n")

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> Sum:
        count("add")
        return Sum(total=a + b, note=f"{a}+{b}")

    @server.tool(description="Shout a word back.")
    def shout(word: str) -> str:
        count("shout")
        return word.upper() + "!"

    @server.tool(description="Says that the tool list changed, to every subscriptions/listen stream.")
    async def touch_tools(ctx: Context) -> str:
        count("touch_tools")
        await ctx.notify_tools_changed()
        return "told"

    @server.resource("demo://info", mime_type="text/plain")
    def info() -> str:
        return "hello from the modern resource"

    @server.prompt()
    def review(code: str) -> str:
        """Review some code."""
        return f"Please review:\n{code}"

    app = server.streamable_http_app(streamable_http_path="/mcp", json_response=args.json, host="127.0.0.1")
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
