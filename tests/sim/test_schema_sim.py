import json
import re
from pathlib import Path

import pytest

from stbproxy.stb.validity import check_result
from stbproxy.synthesis.templates import (
    MAX_DEPTH,
    MAX_LIST_LENGTH,
    repair_truncated_json,
    simulate_from_template,
    virtual_answer,
)
from tests.stb_samples import is_sample

G1 = Path("solvable_queries") / "test_instruction" / "G1_instruction.json"


def _g1_templates(stb_data: Path) -> list:
    queries = json.loads((stb_data / G1).read_text(encoding="utf-8"))
    return [api.get("template_response") for q in queries for api in q["api_list"]]


def _many(stb_data: Path) -> int:
    """How many templates a query file has at least: the sample's few, the real file's hundreds."""
    return 30 if is_sample(stb_data) else 100


def _dump(value) -> str:
    return json.dumps(value, sort_keys=False, ensure_ascii=False)


def _walk(node):
    yield node
    if isinstance(node, dict):
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


# --- every real template -------------------------------------------------------------


@pytest.fixture
def g1_templates(stb_data):
    return _g1_templates(stb_data)


def test_every_g1_template_simulates_deterministically(g1_templates, stb_data):
    assert len(g1_templates) > _many(stb_data)
    for i, template in enumerate(g1_templates):
        first = _dump(simulate_from_template(template, f"key-{i}"))
        assert first == _dump(simulate_from_template(template, f"key-{i}")), template
        assert len(first) < 200_000
        assert "_list_length" not in first


def test_different_keys_give_different_answers(g1_templates):
    rich = [t for t in g1_templates if isinstance(t, dict) and any(v == "str" for v in _walk(t))]
    assert rich
    for template in rich:
        assert _dump(simulate_from_template(template, "a")) != _dump(simulate_from_template(template, "b"))


def test_g1_dict_templates_keep_their_keys(g1_templates):
    for i, template in enumerate(t for t in g1_templates if isinstance(t, dict) and t):
        out = simulate_from_template(template, str(i))
        assert isinstance(out, dict)
        assert list(out) == [k for k in template if k != "_list_length"]


def _keys_are_harmless(template) -> bool:
    # Keys that are themselves failure words would fail any answer, simulated or real.
    text = str(template).lower()
    markers = ("parameter", "status_code", "parse", "404", "500", "blocked", "authent")
    return not any(m in text for m in markers)


def test_simulated_answers_pass_the_validity_rules(g1_templates, stb_data):
    usable = [t for t in g1_templates if _keys_are_harmless(t)]
    assert len(usable) > _many(stb_data)
    for i, template in enumerate(usable):
        answer = virtual_answer(template, f"valid-{i}")
        assert check_result(answer), answer


def test_list_lengths_follow_the_markers(g1_templates):
    checked = 0
    for i, template in enumerate(g1_templates):
        if not isinstance(template, dict):
            continue
        out = simulate_from_template(template, f"len-{i}")
        for tnode, onode in _paired(template, out):
            if isinstance(tnode, list) and len(tnode) == 1 and isinstance(tnode[0], dict):
                wanted = tnode[0].get("_list_length")
                if isinstance(wanted, int):
                    assert 1 <= len(onode) <= min(wanted, MAX_LIST_LENGTH)
                    checked += 1
    assert checked > 20


def _paired(template, out):
    """(template node, output node) pairs along the template's structure."""
    yield template, out
    if isinstance(template, dict) and isinstance(out, dict):
        for key, value in template.items():
            if key in out:
                yield from _paired(value, out[key])
    elif isinstance(template, list) and isinstance(out, list) and template and out:
        if len(template) == 1:
            for item in out:
                yield from _paired(template[0], item)


# --- leaf spellings -----------------------------------------------------------------


@pytest.mark.parametrize(
    "leaf, check",
    [
        ("str", lambda v: isinstance(v, str) and v),
        ("int", lambda v: isinstance(v, int) and not isinstance(v, bool)),
        ("float", lambda v: isinstance(v, float)),
        ("bool", lambda v: isinstance(v, bool)),
        ("NoneType", lambda v: v is None),
        ("empty list", lambda v: v == []),
        ("list", lambda v: v == []),
        ("dict", lambda v: v == {}),
        ("list of str with length 3", lambda v: len(v) == 3 and all(isinstance(x, str) for x in v)),
        ("list of int with length 2", lambda v: len(v) == 2 and all(type(x) is int for x in v)),
        ("list of float with length 252", lambda v: len(v) == MAX_LIST_LENGTH),
        ("list of NoneType with length 4", lambda v: v == [None] * 4),
        ("list of list with length 3", lambda v: v == [[], [], []]),
        ("list of bool with length 1", lambda v: len(v) == 1 and isinstance(v[0], bool)),
    ],
)
def test_every_leaf_spelling(leaf, check):
    out = simulate_from_template({"field": leaf, "wrapped": [leaf]}, "k")
    assert check(out["field"])
    if leaf.startswith("list of"):
        assert check(out["wrapped"])  # ["list of str with length 3"] is one flat list
    else:
        assert len(out["wrapped"]) == 1 and check(out["wrapped"][0])


def test_list_length_marker_is_honoured_and_dropped():
    template = {"items": [{"name": "str", "_list_length": 3}], "big": [{"x": "int", "_list_length": 500}]}
    out = simulate_from_template(template, "k")
    assert len(out["items"]) == 3 and all(set(item) == {"name"} for item in out["items"])
    assert len(out["big"]) == MAX_LIST_LENGTH
    assert len({item["name"] for item in out["items"]}) > 1  # elements are not copies


@pytest.mark.parametrize(
    "key, pattern",
    [
        ("url", r"https://[\w.]*example\.com/\S+"),
        ("profileLink", r"https://[\w.]*example\.com/\S+"),
        ("avatar_url", r"https://img\.example\.com/\S+\.jpg"),
        ("email", r"[a-z]+\.[a-z]+@example\.com"),
        ("release_date", r"\d{4}-\d{2}-\d{2}"),
        ("createdAt", r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z"),
        ("id", r"\d{6,10}"),
        ("channelId", r"\d{6,10}"),
        ("uuid", r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"),
        ("name", r"[A-Z][a-z]+ [A-Z][a-z]+"),
        ("country_code", r"[A-Z]{2}"),
        ("currency", r"[A-Z]{3}"),
        ("phone", r"\+1 555 \d{3} \d{4}"),
        ("description", r"[A-Z][a-z ]+\."),
        ("version", r"\d+\.\d+\.\d+"),
    ],
)
def test_strings_are_shaped_by_field_name(key, pattern):
    for seed in ("a", "b", "c"):
        value = simulate_from_template({key: "str"}, seed)[key]
        assert re.fullmatch(pattern, value), value


@pytest.mark.parametrize(
    "key, low, high",
    [("year", 1990, 2024), ("month", 1, 12), ("latitude", -90, 90), ("lng", -180, 180), ("rating", 0, 5)],
)
def test_numbers_are_shaped_by_field_name(key, low, high):
    for seed in range(20):
        for leaf in ("int", "float"):
            value = simulate_from_template({key: leaf}, str(seed))[key]
            assert low <= value <= high


def test_truncated_template_text_is_repaired():
    text = '{"a": "str", "b": [{"c": "int", "_list_length": 2}], "d": {"e": "s'
    assert repair_truncated_json(text) == {"a": "str", "b": [{"c": "int", "_list_length": 2}]}
    out = simulate_from_template(text, "k")
    assert set(out) == {"a", "b"} and len(out["b"]) == 2 and isinstance(out["b"][0]["c"], int)
    assert repair_truncated_json('{"a": "x, y", "b') == {"a": "x, y"}  # commas in strings
    assert repair_truncated_json("not json {") is None


def test_g1_truncated_templates_become_dicts(g1_templates):
    truncated = [t for t in g1_templates if isinstance(t, str)]
    assert truncated  # query files hold some templates cut off in the middle, as text
    for i, text in enumerate(truncated):
        assert isinstance(simulate_from_template(text, str(i)), dict)


# --- examples ------------------------------------------------------------------------


def test_example_shape_is_followed_with_fresh_values():
    example = {
        "results": [
            {"id": 123456, "url": "https://x.org/a", "when": "2020-01-02", "score": 1.5,
             "ok": True, "note": None, "code": "00123"},
            {"id": 7, "url": "https://x.org/b", "when": "2020-01-03", "score": 2.5,
             "ok": False, "note": None, "code": "00999"},
        ],
        "total": 2,
    }  # fmt: skip
    out = simulate_from_template(None, "k", example=example)
    assert list(out) == ["results", "total"] and len(out["results"]) == 2
    first = out["results"][0]
    assert list(first) == list(example["results"][0])
    assert type(first["id"]) is int and isinstance(first["score"], float)
    assert isinstance(first["ok"], bool) and first["note"] is None
    assert first["url"].startswith("https://") and "x.org" not in first["url"]
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", first["when"])
    assert re.fullmatch(r"\d{5}", first["code"])
    assert out == simulate_from_template(None, "k", example=example)
    assert out != simulate_from_template(None, "other", example=example)


def test_example_response_object_and_json_text_are_unwrapped():
    stored = {"error": "", "response": json.dumps({"title": "Hello", "tags": ["a", "b", "c"]})}
    out = simulate_from_template(None, "k", example=stored)
    assert isinstance(out, str)  # the real answer was JSON text, so is the simulated one
    parsed = json.loads(out)
    assert set(parsed) == {"title", "tags"} and len(parsed["tags"]) == 3
    assert parsed["title"] != "Hello"


def test_template_wins_over_example():
    out = simulate_from_template({"a": "int"}, "k", example={"b": "x"})
    assert list(out) == ["a"]


@pytest.mark.parametrize("template", [None, {}, "", "   "])
def test_no_template_and_no_example_still_answers(template):
    answer = virtual_answer(template, "k")
    assert answer["error"] == "" and isinstance(answer["response"], dict) and answer["response"]
    assert check_result(answer)


def test_output_is_bounded():
    deep: dict = {"v": "str"}
    for _ in range(MAX_DEPTH + 10):
        deep = {"n": deep}
    out = simulate_from_template(deep, "k")
    assert len(json.dumps(out)) < 2000
    wide = {"a": [{"b": [{"c": [{"d": "str", "_list_length": 50}], "_list_length": 50}], "_list_length": 50}]}
    assert len(json.dumps(simulate_from_template(wide, "k"))) < 200_000


def test_seed_key_may_be_bytes():
    assert simulate_from_template({"a": "str"}, b"k") == simulate_from_template({"a": "str"}, "k")


def test_virtual_answer_wraps_the_response():
    template = {"temp": "float", "city": "str"}
    answer = virtual_answer(template, "k")
    assert answer == {"error": "", "response": simulate_from_template(template, "k")}
