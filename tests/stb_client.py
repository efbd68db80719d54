"""StableToolBench's inference client, as far as it talks to a virtual API server.

The script below sends each call exactly as ``rapidapi_wrapper._step`` in StableToolBench's
``toolbench/inference/Downstream_tasks/rapidapi_multithread.py`` does: ``SERVICE_URL`` from
the environment, a POST of the six fields with ``json=``, the key repeated as a
``toolbench_key`` header, no timeout for a URL ending in "virtual"; and it turns the reply
into the observation the agent would see the same way (a non-200 or a body that is not
JSON becomes "request invalid, data error"). It runs as its own process with the
environment a user would give it (HTTP_PROXY for the transparent way, none for drop-in).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

CLIENT = r"""
import json, os, sys, requests
service_url = os.getenv("SERVICE_URL", "http://8.130.32.149:8080/rapidapi")
out = []
for call in json.loads(sys.argv[1]):
    payload = {"category": call["category"], "tool_name": call["tool_name"], "api_name": call["api_name"],
               "tool_input": call["tool_input"], "strip": "truncate", "toolbench_key": call["toolbench_key"]}
    headers = {"toolbench_key": call["toolbench_key"]}
    timeout = None if service_url.endswith("virtual") else 15
    response = requests.post(service_url, json=payload, headers=headers, timeout=timeout)
    source = response.headers.get("X-Stb-Source")
    if response.status_code != 200:
        observation = json.dumps({"error": f"request invalid, data error. status_code={response.status_code}",
                                  "response": ""})
    else:
        try:
            observation = json.dumps(response.json())
        except Exception:
            observation = json.dumps({"error": "request invalid, data error", "response": ""})
    out.append({"status": response.status_code, "source": source, "observation": observation})
print(json.dumps(out))
"""


def stb_client(env: dict[str, str], calls: list[dict]) -> list[dict]:
    """Run the client with ``env`` (SERVICE_URL, and the proxy settings for transparent use)."""
    clean = {k: v for k, v in os.environ.items()
             if k.lower() not in ("http_proxy", "https_proxy", "no_proxy", "service_url")}
    result = subprocess.run([sys.executable, "-c", CLIENT, json.dumps(calls)], env={**clean, **env},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def stb_call(category: str, tool_name: str, api_name: str, arguments: dict, key: str) -> dict:
    """One call as the client makes it: the standardized tool and API names it was shown,
    and the agent's arguments as the JSON text the model wrote."""
    return {"category": category, "tool_name": tool_name, "api_name": api_name,
            "tool_input": json.dumps(arguments), "toolbench_key": key}
