"""A small tool-using agent, unmodified by the proxy: its model over the openai client, its
tools from an MCP server over the official SDK, both reached through HTTP_PROXY.

    python agent.py '{"llm": "http://127.0.0.1:P/v1", "mcp": "http://127.0.0.1:Q/mcp", "task": "..."}'

It lists the server's tools, offers them to the model (named ``demo__<tool>``, as MCP hosts
prefix a server's tools), runs each tool call the model asks for, and stops when the model
answers in text or after a few turns. It prints the final answer.
"""

from __future__ import annotations

import asyncio
import json
import sys

import openai
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

PREFIX = "demo__"


async def main(plan: dict) -> str:
    llm = openai.AsyncOpenAI(base_url=plan["llm"], api_key="sk-agent-test", max_retries=0)
    async with streamablehttp_client(plan["mcp"]) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            tools = [{"type": "function", "function": {"name": PREFIX + t.name, "description": t.description or "",
                                                       "parameters": t.inputSchema}} for t in listed.tools]
            messages = [{"role": "system", "content": "You are a helpful agent."},
                        {"role": "user", "content": plan["task"]}]
            for _ in range(4):
                reply = (await llm.chat.completions.create(model="fake", messages=messages, tools=tools)).choices[0]
                message = reply.message
                messages.append(message.model_dump(exclude_none=True))
                if not message.tool_calls:
                    return message.content or ""
                for call in message.tool_calls:
                    result = await session.call_tool(call.function.name.removeprefix(PREFIX),
                                                     json.loads(call.function.arguments))
                    text = "\n".join(c.text for c in result.content if getattr(c, "text", None))
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
    return ""


if __name__ == "__main__":
    print(json.dumps({"answer": asyncio.run(main(json.loads(sys.argv[1])))}))
