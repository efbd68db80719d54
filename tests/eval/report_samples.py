"""Synthetic report documents (``stbeval-report/1``) for the HTML report's tests, its
benchmark and its screenshot: deterministic for given parameters, realistic in shape
(StableToolBench groups, tool calls with JSON arguments and answers, calls by source).

Fixed features the tests count on:
- ids are "1".."n" (natural sort puts "2" before "10");
- the word "needle" appears in the query text of every query whose number is a multiple of 17;
- with ``hostile``, query 3's answers, final answer and query text hold markup that must
  show as text (``HOSTILE`` and ``CLOSER``);
- with a baseline, a query changed vs the baseline exactly when ``changed_ids`` says so.
"""

from __future__ import annotations

import json
import random
from typing import Any

GROUPS = ("G1_instruction", "G1_category", "G1_tool", "G2_instruction", "G2_category", "G3_instruction")
HOSTILE = "<script>window.pwned=1</script>"
CLOSER = "</script><script>window.pwned=2</script>"
NEEDLE = "needle"

_TOOLS = [
    ("get_weather_forecast_for_weatherapi", {"q": "Lisbon", "days": 3},
     {"location": {"name": "Lisbon", "country": "Portugal"}, "forecast": [{"date": "2024-05-02", "max_c": 23.1,
                                                                            "min_c": 14.0, "condition": "Sunny"}]}),
    ("search_hotels_for_booking_com", {"city": "Lisbon", "max_price": 150, "currency": "EUR"},
     {"results": [{"name": "Casa do Largo", "price": 128, "rating": 8.9}, {"name": "Rossio Rooms", "price": 96,
                                                                           "rating": 8.4}]}),
    ("convert_currency_for_exchangerate", {"from": "USD", "to": "EUR", "amount": 250},
     {"result": 231.42, "rate": 0.92568, "date": "2024-04-30"}),
    ("search_tracks_for_spotify", {"q": "Miles Davis", "type": "track", "limit": 5},
     {"tracks": [{"name": "So What", "album": "Kind of Blue", "popularity": 71}, {"name": "Blue in Green",
                                                                                  "album": "Kind of Blue"}]}),
    ("get_stock_quote_for_alpha_vantage", {"symbol": "MSFT"},
     {"symbol": "MSFT", "price": 402.56, "change_percent": "-0.41%", "volume": 18234411}),
    ("lookup_recipe_for_spoonacular", {"query": "vegan lasagna", "number": 3},
     {"results": [{"id": 715594, "title": "Vegan Lasagna with Cashew Ricotta", "readyInMinutes": 75}]}),
    ("get_movie_details_for_imdb", {"title": "Arrival", "year": 2016},
     {"title": "Arrival", "director": "Denis Villeneuve", "rating": 7.9, "runtime": "116 min"}),
]
_QUERIES = [
    "I'm planning a long weekend in Lisbon next month. What will the weather be like, and can you find three "
    "hotels near the centre under 150 EUR a night?",
    "Convert 250 USD to EUR at today's rate and tell me how that compares with last week's average.",
    "Find five tracks by Miles Davis from Kind of Blue and give me their popularity scores.",
    "What is Microsoft's current stock price and its change today? Also list the trading volume.",
    "I need a vegan lasagna recipe that takes less than 90 minutes, with the ingredient list.",
    "Give me the director, runtime and rating of the film Arrival (2016), and two similar films.",
]
_SOURCES = ("upstream", "cache", "cache", "cache", "simulated", "simulated", "injected", "error", "imported")


def _answer(rng: random.Random, payload: dict, size: int) -> str:
    """An answer as StableToolBench stores them: ``{"error": "", "response": "..."}``, about ``size`` characters."""
    text = json.dumps({"error": "", "response": json.dumps(payload)})
    if len(text) >= size:
        return text
    words = ("lorem", "ipsum", "dolor", "amet", "tempor", "magna", "aliqua")
    filler = " ".join(rng.choice(words) for _ in range(size // 5 + 1))
    # the note's quotes are escaped twice: ~20 characters of overhead
    note = filler[: max(1, size - len(text) - 20)]
    return json.dumps({"error": "", "response": json.dumps(dict(payload, note=note))})


def _trajectory(rng: random.Random, number: int, text: str, steps: int, answer_chars: int,
                hostile: bool) -> list[dict]:
    trajectory = [{"role": "user", "text": text, "tool": None, "answer": None, "source": None, "key": None}]
    for call in range(max(0, steps - 1)):
        name, args, payload = _TOOLS[(number + call) % len(_TOOLS)]
        source = rng.choice(_SOURCES)
        answer = _answer(rng, payload, answer_chars)
        if hostile and call == 0:
            answer = json.dumps({"error": "", "response": f"{HOSTILE} and {CLOSER}"})
        trajectory.append({
            "role": "assistant",
            "text": f"Step {call + 1}: I will call {name.split('_for_')[0]} to get what the user asked for.",
            "tool": {"name": name, "arguments": json.dumps(args)},
            "answer": answer, "source": source,
            "key": f"GET https://api.{name.split('_for_')[1]}.example/v1/{name.split('_for_')[0]}#{number:04d}{call}",
        })
    return trajectory


def _status(rng: random.Random, rounds: int) -> list[str]:
    p = rng.random()
    if p < 0.35:
        return ["solved"] * rounds
    if p < 0.55:
        return ["unsolved"] * rounds
    return [rng.choice(("solved", "solved", "unsolved", "unsure", "unscored")) for _ in range(rounds)]


def changed_ids(n: int) -> set[str]:
    """The queries a baseline document marks as changed."""
    return {str(i) for i in range(1, n + 1) if i % 7 == 0 or i % 11 == 0 or i % 13 == 0}


def _baseline_of(number: int, status: list[str], steps: int) -> dict[str, Any]:
    changed, base_status, base_steps, changed_steps = [], list(status), steps, []
    if number % 7 == 0:
        base_status = ["unsolved" if s == "solved" else "solved" for s in status]
        changed.append("status")
    if number % 11 == 0:
        base_steps = steps + 2
        changed.append("steps")
    if number % 13 == 0 and steps > 2:
        changed_steps = [1, steps - 1]
        changed.append("answers")
    elif number % 13 == 0:
        base_steps = steps + 1
        changed.append("steps")
    return {"status": base_status, "steps": base_steps, "changed": changed, "changed_steps": changed_steps}


def _sources(trajectory: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for step in trajectory:
        if step["source"]:
            counts[step["source"]] = counts.get(step["source"], 0) + 1
    return counts


def make_document(n: int = 40, rounds: int = 3, *, baseline: bool = False, pass_k: bool = True,
                  stability: bool = True, steps: int = 6, answer_chars: int = 300, hostile: bool = False,
                  seed: int = 7) -> dict[str, Any]:
    """A report document of ``n`` queries judged ``rounds`` times, about ``steps`` steps each."""
    rng = random.Random(seed)
    queries = []
    for number in range(1, n + 1):
        count = max(1, steps + rng.choice((-2, -1, 0, 0, 1, 2))) if steps else 0
        text = _QUERIES[number % len(_QUERIES)]
        if number % 17 == 0:
            text += f" (look for the {NEEDLE} in the results)"
        if hostile and number == 3:
            text += f" {HOSTILE}"
        trajectory = _trajectory(rng, number, text, count, answer_chars, hostile and number == 3)
        status = _status(rng, rounds)
        final = "Here is what I found: " + trajectory[-1]["tool"]["name"] + " gave the figures above." \
            if len(trajectory) > 1 else "I could not find an answer."
        if hostile and number == 3:
            final += f" {CLOSER}"
        query = {
            "id": str(number), "group": GROUPS[number % len(GROUPS)], "query": text, "final_answer": final,
            "status": status, "steps": len(trajectory), "sources": _sources(trajectory),
            "reasons": [("The answer covers every part of the query." if s == "solved" else
                         "The answer leaves out part of the query." if s == "unsolved" else
                         "The judge could not tell from the answer." if s == "unsure" else "") for s in status],
            "trajectory": trajectory,
            "baseline": _baseline_of(number, status, len(trajectory)) if baseline else None,
        }
        queries.append(query)
    totals: dict[str, int] = {}
    for query in queries:
        for name, count in query["sources"].items():
            totals[name] = totals.get(name, 0) + count
    solved = [sum(q["status"][r] == "solved" for q in queries) / max(1, n) * 100 for r in range(rounds)]
    mean = sum(solved) / max(1, rounds)
    std = (sum((s - mean) ** 2 for s in solved) / max(1, rounds)) ** 0.5
    run = {
        "name": "my_agent", "folder": "runs/my_agent", "kind": "pass_rate", "rounds": rounds,
        "metrics": [{"label": "SoPR", "value": round(mean, 1), "std": round(std, 1),
                     "detail": f"mean ± std over {rounds} rounds"}],
        "groups": [{"name": g, "metrics": {"SoPR": [round(40 + 7 * i % 35, 1), round(1.5 + i * 0.4, 1)]}}
                   for i, g in enumerate(GROUPS)],
        "pass_k": None, "sources": totals, "stability": None, "queries": queries,
    }
    if pass_k:
        ks = list(range(1, rounds + 1))
        run["pass_k"] = {"k": ks, "pass@k": [min(1.0, 0.42 + 0.09 * (k - 1) - 0.01 * (k - 1) ** 2) for k in ks],
                         "pass^k": [max(0.0, 0.42 - 0.07 * (k - 1) + 0.005 * (k - 1) ** 2) for k in ks]}
        run["metrics"] += [{"label": f"pass^{rounds}", "value": round(100 * run["pass_k"]["pass^k"][-1], 1),
                            "std": None, "detail": f"all {rounds} trials pass ({n} queries)"},
                           {"label": f"pass@{rounds}", "value": round(100 * run["pass_k"]["pass@k"][-1], 1),
                            "std": None, "detail": f"at least one of {rounds} trials passes"}]
    if stability:
        rates = [0, 5, 10, 20, 30, 50]
        run["stability"] = {"x_label": "fault rate (%)", "y_label": "SoPR (%)", "series": [
            {"name": "through stbproxy (cache)", "points": [[x, round(mean - 0.02 * x, 1)] for x in rates]},
            {"name": "upstream only", "points": [[x, round(mean - 0.55 * x, 1)] for x in rates]},
            {"name": "simulated fallback", "points": [[x, round(mean - 0.18 * x, 1)] for x in rates]}]}
    base = None
    if baseline:
        base = {"name": "my_agent_last_week", "folder": "runs/my_agent_last_week", "kind": "pass_rate",
                "rounds": rounds,
                "metrics": [dict(m, value=None if m["value"] is None else round(m["value"] - 3.4, 1),
                                 std=None if m["std"] is None else round(m["std"] + 0.6, 1)) for m in run["metrics"]],
                "groups": [{"name": g["name"], "metrics": {"SoPR": [g["metrics"]["SoPR"][0] - 4.0, 2.0]}}
                           for g in run["groups"]],
                "pass_k": None, "sources": {"upstream": totals.get("upstream", 0) * 3, "cache": totals.get("cache", 0)},
                "stability": None, "queries": []}
    return {"format": "stbeval-report/1", "title": f"Evaluation of my_agent ({n} queries)", "runs": [run],
            "baseline": base}
