"""Answers from vcrpy cassettes: one cassette (or session folder) per query, or many
conversations in one recording.

A cassette holds an agent's LLM calls and the tool HTTP calls it made. trajectories.py
turns them into one answer per conversation: a cassette named by its query id (or a
session folder of cassettes) that holds one conversation keeps that id, and one that
holds many names each by the query it states (``--queries``) or by a digest.

Cassettes are read with vcrpy's own deserializer, never through the proxy package; a
cassette document already in memory (what a tool that embeds stbeval hands over, e.g.
a proxy session) is read the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vcr.request import Request as VcrRequest
from vcr.serialize import deserialize
from vcr.serializers import compat, jsonserializer, yamlserializer

from .llm_apis import body_text
from .model import Problem
from .queries import QueryIndex
from .trajectories import Named, Recorded, answers_from_traffic, read_traffic

CASSETTE_SUFFIXES = (".yaml", ".yml")


class _Bad(Exception):
    """A cassette that cannot be read; the message says why."""


def load_cassette(path: Path, qid: str, queries: QueryIndex | None = None) -> tuple[list[Named], list[str]]:
    """The answers recorded in one cassette file named ``qid`` (its stem), and notes."""
    try:
        recorded, meta = _read(path)
    except _Bad as exc:
        return [(None, Problem(qid, str(exc), str(path)))], []
    return answers_from_traffic(read_traffic(recorded), where=str(path), queries=queries, single_id=qid, meta=meta)


def load_session(folder: Path, qid: str, queries: QueryIndex | None = None) -> tuple[list[Named], list[str]]:
    """The answers recorded across the cassettes of a session folder, in file-name order."""
    recorded: list[Recorded] = []
    meta: dict[str, Any] = {}
    try:
        for file in sorted(folder.iterdir(), key=lambda p: p.name):
            if file.is_file() and file.suffix in (".json", *CASSETTE_SUFFIXES):
                more, file_meta = _read(file, start=len(recorded))
                recorded.extend(more)
                meta.update(file_meta)
    except _Bad as exc:
        return [(None, Problem(qid, str(exc), str(folder)))], []
    return answers_from_traffic(read_traffic(recorded), where=str(folder), queries=queries, single_id=qid, meta=meta)


def load_document(document: dict[str, Any], where: str,
                  queries: QueryIndex | None = None) -> tuple[list[Named], list[str]]:
    """The answers of a cassette document in memory (``{"interactions": [...]}``), one per
    conversation, named by query or digest."""
    try:
        recorded = recorded_from_document(document)
    except ValueError as exc:
        return [], [f"{where}: {exc}"]
    return answers_from_traffic(read_traffic(recorded), where=where, queries=queries)


def recorded_from_document(document: dict[str, Any]) -> list[Recorded]:
    """The interactions of a cassette document, read as vcrpy reads a cassette file."""
    try:
        interactions = document["interactions"]
        requests = [VcrRequest(i["request"]["method"], i["request"]["uri"], i["request"].get("body"),
                               i["request"].get("headers") or {}) for i in interactions]
        responses = [compat.convert_to_bytes(i["response"]) for i in interactions]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not a cassette document ({type(exc).__name__}: {exc})") from exc
    return _recorded(requests, responses)


def _read(path: Path, start: int = 0) -> tuple[list[Recorded], dict[str, Any]]:
    serializer = yamlserializer if path.suffix in CASSETTE_SUFFIXES else jsonserializer
    try:
        loaded = deserialize(path.read_text(encoding="utf-8"), serializer)
    except Exception as exc:  # vcrpy raises ValueError, yaml and json errors alike
        raise _Bad(f"not a readable vcrpy cassette ({type(exc).__name__}: {exc})") from exc
    meta = loaded[2] if len(loaded) > 2 and isinstance(loaded[2], dict) else {}
    return _recorded(loaded[0], loaded[1], start), meta


def _recorded(requests: list[Any], responses: list[dict[str, Any]], start: int = 0) -> list[Recorded]:
    out = []
    for offset, (request, response) in enumerate(zip(requests, responses)):
        status = (response.get("status") or {}).get("code", 200)
        out.append(Recorded(
            index=start + offset,
            method=str(request.method).upper(),
            url=str(request.uri),
            path=str(request.path),
            request_text=body_text(request.body, dict(request.headers)),
            request_headers={str(k).lower(): str(v) for k, v in dict(request.headers).items()},
            status=int(status) if isinstance(status, (int, str)) and str(status).isdigit() else 200,
            response_text=body_text((response.get("body") or {}).get("string"), response.get("headers") or {}),
            source=_header(response, "x-stb-served") or _header(response, "x-stb-source"),
            key=_header(response, "x-stb-key"),
        ))
    return out


def _header(response: dict[str, Any], name: str) -> str | None:
    """A response header of a cassette (vcrpy keeps each as a list of values), or None."""
    for key, value in (response.get("headers") or {}).items():
        if str(key).lower() == name:
            value = value[0] if isinstance(value, list) and value else value
            return str(value) if value else None
    return None
