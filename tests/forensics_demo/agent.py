"""A small tool-using agent, unmodified by stbproxy: plain `requests`, configured by its
environment only (HTTP_PROXY and the CA bundle from outside, AGENT_LLM and WORLD for
where its model and its weather API are).

Usage: python agent.py "What is the weather in Paris?"  -> prints a JSON summary.
It asks its model, calls the tool the model chooses, and stops when the model calls
Finish (ToolBench's convention) or after a few turns.
"""

import json
import os
import sys

import requests

LLM = os.environ["AGENT_LLM"]
WORLD = os.environ["WORLD"]
API_KEY = os.environ.get("WORLD_API_KEY", "world-secret-4242")
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather of a city.",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "Finish", "description": "Give the final answer or give up.",
                                      "parameters": {"type": "object", "properties": {
                                          "return_type": {"type": "string",
                                                          "enum": ["give_answer", "give_up_and_restart"]},
                                          "final_answer": {"type": "string"}}, "required": ["return_type"]}}},
]


def main(query: str) -> dict:
    messages = [{"role": "system", "content": "You answer weather questions with the tools you have."},
                {"role": "user", "content": query}]
    seen = []
    for _turn in range(4):
        reply = requests.post(f"{LLM}/v1/chat/completions", timeout=30, headers={"Authorization": "Bearer agent-key"},
                              json={"model": "agent-model", "messages": messages, "tools": TOOLS,
                                    "temperature": 1.0, "seed": 7})
        reply.raise_for_status()
        message = reply.json()["choices"][0]["message"]
        messages.append(message)
        for call in message.get("tool_calls") or []:
            arguments = json.loads(call["function"]["arguments"])
            if call["function"]["name"] == "Finish":
                return {"final": arguments, "seen": seen}
            answer = requests.get(f"{WORLD}/weather", params={"city": arguments["city"]},
                                  headers={"X-Api-Key": API_KEY}, timeout=30)
            seen.append(answer.json())
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": answer.text})
    return {"final": None, "seen": seen}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
