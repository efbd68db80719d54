"""The drift report of ``stbproxy check``: for each imported operation, what the store holds
of it measured against the spec as it is now. Real answers that break their documented
schema (the API changed), simulated ones that do (a bug: there must be none), parameters
the operation does not declare, and operations never called. Reads exchanges it is given."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable
from urllib.parse import parse_qsl, urlsplit

from stbproxy.models import Exchange, Source
from stbproxy.openapi.catalog import OpenApiCatalog
from stbproxy.openapi.traffic import PREFIX, answer_problem

REAL = frozenset({Source.UPSTREAM, Source.IMPORTED})
MADE_UP = frozenset({Source.SIMULATED})
EXAMPLE_CHARS = 200


@dataclass
class OperationDrift:
    operation: str  # <spec>/<operationId>
    method: str
    path: str
    stored: int = 0
    real: int = 0
    real_broken: int = 0
    simulated: int = 0
    simulated_broken: int = 0
    invalid_logged: int = 0  # real answers judged invalid and logged (--validity schema), not stored
    rejected: int = 0  # simulated answers to requests that broke the document (a 4xx of its validation)
    first_real_problem: str | None = None
    first_simulated_problem: str | None = None
    undeclared: set[str] = field(default_factory=set)

    def count(self, origin: str, problem: str | None, stored: bool = True) -> None:
        """One answer of ``origin`` ("real" or "simulated"), and how it broke the schema if it
        did; ``stored`` False for a real answer that was logged as invalid instead."""
        if stored:
            setattr(self, origin, getattr(self, origin) + 1)
        if problem is not None:
            setattr(self, f"{origin}_broken", getattr(self, f"{origin}_broken") + 1)
            first = f"first_{origin}_problem"
            setattr(self, first, getattr(self, first) or _short(problem))

    @property
    def called(self) -> bool:
        return bool(self.stored or self.invalid_logged)

    def to_dict(self) -> dict[str, Any]:
        return {"operation": self.operation, "method": self.method, "path": self.path, "stored": self.stored,
                "real": self.real, "real_broken": self.real_broken, "first_real_problem": self.first_real_problem,
                "simulated": self.simulated, "simulated_broken": self.simulated_broken,
                "first_simulated_problem": self.first_simulated_problem, "invalid_logged": self.invalid_logged,
                "rejected_requests": self.rejected,
                "undeclared_parameters": sorted(self.undeclared)}


@dataclass
class DriftReport:
    operations: list[OperationDrift]
    not_in_catalog: int = 0  # entries under openapi/ whose operation is no longer imported

    @property
    def real_drift(self) -> list[OperationDrift]:
        return [o for o in self.operations if o.real_broken]

    @property
    def simulated_drift(self) -> list[OperationDrift]:
        return [o for o in self.operations if o.simulated_broken]

    @property
    def never_called(self) -> list[OperationDrift]:
        return [o for o in self.operations if not o.called]

    def to_dict(self) -> dict[str, Any]:
        return {"operations": [o.to_dict() for o in self.operations],
                "never_called": [o.operation for o in self.never_called],
                "totals": {"operations": len(self.operations),
                           "with_real_drift": len(self.real_drift),
                           "with_simulated_drift": len(self.simulated_drift),
                           "with_undeclared_parameters": sum(1 for o in self.operations if o.undeclared),
                           "never_called": len(self.never_called),
                           "entries_of_operations_no_longer_imported": self.not_in_catalog}}


def drift_report(catalog: OpenApiCatalog, stored: Iterable[Exchange], logged_invalid: Iterable[Exchange],
                 spec: str | None = None) -> DriftReport:
    """``stored``: the entries under ``openapi/``; ``logged_invalid``: the invalid real answers
    the proxy logged instead of storing; ``spec``: report only this spec's operations."""
    rows = {op.name: OperationDrift(op.name, op.method, op.path) for op in catalog.operations()
            if spec is None or op.spec == spec}
    secret = {name for names in catalog.secret_names().values() for name in names}
    report = DriftReport(list(rows.values()))
    for exchange in stored:
        name = _operation_of(exchange.key)
        row = rows.get(name)
        op = catalog.operation(name)
        if row is None or op is None:
            report.not_in_catalog += op is None and (spec is None or name.startswith(f"{spec}/"))
            continue
        row.stored += 1
        declared = {p.name for p in op.parameters if p.where == "query"}
        row.undeclared |= {k for k, _ in parse_qsl(urlsplit(exchange.request.url).query, keep_blank_values=True)
                           if k not in declared and k not in secret}
        origin = "real" if exchange.source in REAL else "simulated" if exchange.source in MADE_UP else None
        if origin == "simulated" and exchange.meta.get("rejected"):  # a broken request's 4xx: its own status
            row.simulated += 1
            row.rejected += 1
        elif origin is not None:
            row.count(origin, answer_problem(op, exchange.response))
    for exchange in logged_invalid:
        row = rows.get(str(exchange.meta.get("operation") or ""))
        if row is None or "drift" not in exchange.meta:
            continue
        row.invalid_logged += 1
        row.count("real", str(exchange.meta["drift"]), stored=False)
    return report


def _operation_of(key: str) -> str:
    """``openapi/<spec>/<operationId>/<digest>`` -> ``<spec>/<operationId>``."""
    return key[len(PREFIX):].rsplit("/", 1)[0]


def _short(text: str) -> str:
    return text if len(text) <= EXAMPLE_CHARS else text[:EXAMPLE_CHARS - 3] + "..."
