"""ToolBench's name standardization (STB_FORMATS.md section 1): the keys of categories,
tools and APIs, and the function names agents see. Pure string functions."""

from __future__ import annotations

import re

# Kept: ASCII letters and digits, "_", CJK ideographs, and "^" (ToolBench wrote "^"
# inside a character class as if it were a separator, so it survives).
_REPLACED = re.compile(r"[^\u4e00-\u9fa5^a-zA-Z0-9_]")
_UNDERSCORE_RUN = re.compile(r"__+")
_RESERVED = frozenset({"from", "class", "return", "false", "true", "id", "and"})


def standardize(s: str) -> str:
    """ToolBench's standardized form of a tool or API name."""
    s = _UNDERSCORE_RUN.sub("_", _REPLACED.sub("_", s)).lower().strip("_")
    if s[:1].isdigit():
        s = "get_" + s
    return s


def change_name(s: str) -> str:
    """Prefix names that are Python keywords or builtins ToolBench avoided."""
    return "is_" + s if s in _RESERVED else s


def api_key_name(api_name: str) -> str:
    return change_name(standardize(api_name))


def category_key(category: str) -> str:
    # One pass of "__" -> "_", as ToolBench does: "a / b" ends as "a__b", not "a_b".
    for ch in " ,/":
        category = category.replace(ch, "_")
    return category.replace("__", "_")


def tool_key(tool_name: str, category: str) -> str:
    """``<standardized tool>_for_<category key>``; accepts a name that already ends so."""
    return tool_key_in(tool_name, category_key(category))


def tool_key_in(tool_name: str, cat_key: str) -> str:
    """``tool_key`` for a category already turned into its key."""
    return standard_tool_name(tool_name, cat_key) + "_for_" + cat_key


def standard_tool_name(tool_name: str, cat_key: str) -> str:
    """The standardized tool name alone (what agents' function names end with)."""
    suffix = "_for_" + cat_key
    if tool_name.endswith(suffix):
        tool_name = tool_name[: -len(suffix)]
    return standardize(tool_name)


def called_api_key(api_name: str, tool_name: str, category: str) -> str:
    """The API key StableToolBench's server reads from a /virtual call's ``api_name``.

    Standardized, and cut before ``_for_<tool>``: agents often send the whole function
    name they were shown (``songkick_concert_for_theclique``) instead of the API's name.
    """
    return called_api_key_of(api_name, standard_tool_name(tool_name, category_key(category)))


def called_api_key_of(api_name: str, tool_std: str) -> str:
    """``called_api_key`` for a tool already standardized (``standard_tool_name``)."""
    key = api_key_name(api_name)
    if not tool_std:
        return key
    return key.split(f"_for_{tool_std}")[0] or key


def function_name(api_name: str, tool_name: str) -> str:
    """The function name agents see; OpenAI limits those to 64 characters."""
    return f"{api_key_name(api_name)}_for_{standardize(tool_name)}"[-64:]


def server_names(category: str, tool_name: str, api_name: str) -> tuple[str, str, str]:
    """(category key, tool key, API key) exactly as StableToolBench's virtual server reads
    them from a /virtual call, which names the cache file it looks in.

    Two quirks of that server are kept, since they decide hits: a tool name that already
    ends in ``_for_<category key>`` is used as given, unstandardized; and the API name is
    cut before ``_for_<tool_name>`` with the tool name as sent (so a function name cut by
    its standardized tool name, ``songkick_concert_for_theclique`` of ``TheClique``, is not
    cut, and names a file of its own).
    """
    cat = category_key(category)
    api = api_key_name(api_name).split(f"_for_{tool_name}")[0]
    tool = tool_name if tool_name.endswith(f"_for_{cat}") else f"{standardize(tool_name)}_for_{cat}"
    return cat, tool, api
