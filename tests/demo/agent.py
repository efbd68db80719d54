"""A tiny tool-using "agent": plain requests, configured only by its environment.

Usage: python agent.py PREFIX DAYS  -> prints JSON with the cities found and the warmest.
It knows nothing of stbproxy: HTTP_PROXY / HTTPS_PROXY and the CA bundle come from outside.
"""

import json
import os
import sys

import requests

BASE = os.environ.get("WEATHER_API", "http://127.0.0.1:18765")
HEADERS = {"X-RapidAPI-Key": os.environ.get("WEATHER_API_KEY", "demo-secret-key-123"),
           "X-RapidAPI-Host": "weather.demo.stbproxy"}


def main(prefix: str, days: int) -> dict:
    found = requests.post(f"{BASE}/v1/cities/search", json={"prefix": prefix, "limit": 3}, headers=HEADERS,
                          timeout=10).json()["results"]
    highs = {}
    for city in found:
        answer = requests.get(f"{BASE}/v1/forecast", params={"city": city, "days": days}, headers=HEADERS, timeout=10)
        answer.raise_for_status()
        highs[city] = max(day["high"] for day in answer.json()["days"])
    return {"cities": found, "highs": highs, "warmest": max(highs, key=highs.get) if highs else None}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]))))
