"""A small synthetic query set in StableToolBench's format, for the stability experiment.

``stbproxy eval stability`` needs tools to knock down and calls to make. A user with
StableToolBench's data passes a query file (``--queries``); everyone else gets this set,
built here so the command works from a fresh install. It is made up, not taken from any
benchmark: 30 tools in 6 categories, 3 APIs each, and 60 single-tool queries that each list
two APIs of their tool. Names, parameters and response templates avoid every word that
StableToolBench's validity rules read as a failure, so a simulated answer is always valid
and the curve with the simulator stays flat; only the tools that are down move the other.
"""

from __future__ import annotations

from typing import Any

CATEGORIES = ("Weather", "Finance", "Sports", "Travel", "Food", "Music")
BRANDS = ("Amber", "Harbor", "Summit", "Cedar", "Lumen")  # five tools per category
QUERY_COUNT = 60


def _string(name: str, description: str, default: str = "") -> dict[str, str]:
    return {"name": name, "type": "STRING", "description": description, "default": default}


def _number(name: str, description: str, default: str = "") -> dict[str, str]:
    return {"name": name, "type": "NUMBER", "description": description, "default": default}


# (api name, description, required, optional, template response): the same three per tool.
Api = tuple[str, str, list[dict[str, str]], list[dict[str, str]], dict[str, Any]]
APIS: tuple[Api, ...] = (
    ("search", "Find entries that match a text.",
     [_string("query", "What to look for", "lisbon")], [_number("limit", "How many results", "5")],
     {"results": [{"name": "str", "summary": "str", "score": "float", "_list_length": 3}], "total": "int"}),
    ("details", "One entry, by its reference.",
     [_string("reference", "The entry's reference")], [],
     {"name": "str", "description": "str", "url": "str", "updated_at": "str"}),
    ("recent", "The newest entries, a page at a time.",
     [], [_number("page", "Which page", "1")],
     {"items": [{"title": "str", "date": "str", "_list_length": 4}], "page": "int"}),
)


def tool_name(category: str, brand: str) -> str:
    return f"{brand} {category}"


def api_entry(category: str, tool: str, api: Api) -> dict[str, Any]:
    """One ``api_list`` entry, as StableToolBench's query files write them."""
    name, description, required, optional, template = api
    return {"category_name": category, "tool_name": tool, "api_name": name, "api_description": description,
            "required_parameters": required, "optional_parameters": optional, "method": "GET",
            "template_response": template}


def builtin_queries() -> list[dict[str, Any]]:
    """The query set: query ``n`` uses tool ``n mod 30`` and two of its three APIs."""
    tools = [(category, tool_name(category, brand)) for category in CATEGORIES for brand in BRANDS]
    queries = []
    for number in range(QUERY_COUNT):
        category, tool = tools[number % len(tools)]
        first = number // len(tools) % len(APIS)
        apis = [APIS[first], APIS[(first + 1) % len(APIS)]]
        queries.append({
            "query": f"With {tool}: {apis[0][1]} {apis[1][1]}",
            "query_id": 900000 + number,
            "api_list": [api_entry(category, tool, api) for api in apis],
            "relevant APIs": [[tool, api[0]] for api in apis],
        })
    return queries
