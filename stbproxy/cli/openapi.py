"""OpenAPI on the command line: ``stbproxy import openapi`` (a spec into the store's OpenAPI
catalog) and ``stbproxy check`` (the drift report of what the store holds against it)."""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

import click

from stbproxy.cli.common import fail, interrupted, store_option
from stbproxy.errors import StbError


@click.command(name="openapi")
@click.argument("spec_file", metavar="SPEC", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@store_option
@click.option("--name", default=None, metavar="NAME",
              help="What keys and reports call the spec [default: its info.title, lower case, words joined by '-'].")
@click.option("--base-url", default=None, metavar="URL",
              help="The API's base URL, in place of every server URL the spec names (a spec with only relative "
                   "servers needs it), e.g. http://127.0.0.1:8080/v1.")
def import_openapi(spec_file, store, name, base_url):
    """Add the operations of an OpenAPI 3.0 or 3.1 document (JSON or YAML) to the store's
    OpenAPI catalog. Requests that match an operation are then keyed by its operationId and
    named arguments, their real answers checked against the documented schemas, and their
    misses simulated in the documented shape. Importing a spec of the same name again
    replaces it; restart a running proxy to use it.

    \b
    Example: stbproxy import openapi petstore.yaml --base-url http://127.0.0.1:8080
    """
    from stbproxy.openapi.catalog import OpenApiCatalog, catalog_file
    from stbproxy.openapi.spec import read_spec
    from stbproxy.private_files import private_dir

    target = catalog_file(store)
    try:
        spec = read_spec(spec_file, name=name, base_url=base_url)
        known = OpenApiCatalog.load(target) if target.exists() else OpenApiCatalog()
        replaced = known.add(spec)
        private_dir(target.parent)  # a store folder made here is the store's: owner-only
        known.save(target)
    except StbError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        interrupted(f"nothing saved: the OpenAPI catalog {target} is as it was")
    servers = sorted({s for op in spec.operations for s in op.servers})
    click.echo(f"{spec_file}: {spec.title} {spec.version} (OpenAPI {spec.openapi}) as {spec.name!r}: "
               f"{_count(len(spec.operations), 'operation')} on {', '.join(servers)}")
    if replaced is not None:
        when = datetime.datetime.fromtimestamp(replaced.imported_at).strftime("%Y-%m-%d %H:%M")
        click.echo(f"replaced the spec {spec.name!r} imported from {replaced.source} on {when} "
                   f"({len(replaced.operations)} operations)")
    for warning in spec.warnings:  # a constraint left out, never the document
        click.echo(f"warning: {spec_file}: at {warning}", err=True)
    secrets = sorted(f"{n} ({place})" for place, names in spec.secrets.items() for n in names)
    if secrets:
        click.echo(f"credentials, never keyed or stored: {', '.join(secrets)}")
    total = sum(1 for _ in known.operations())
    click.echo(f"OpenAPI catalog {target}: {_count(len(known), 'spec')}, {_count(total, 'operation')}")


@click.command()
@store_option
@click.option("--spec", "spec_name", default=None, metavar="NAME", help="Only this spec's operations.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the table.")
@click.option("--strict", is_flag=True,
              help="Exit with status 1 when a real answer broke its schema (or a simulated one did).")
def check(store, spec_name, as_json, strict):
    """The drift report of the store's OpenAPI operations: per operation, the real answers
    that break the schema documented for their status (with the first failing JSON pointer),
    simulated answers that do (there must be none), query parameters the operation does not
    declare, and the operations never called. Every stored answer is checked against the
    specs as imported now.

    Works while a proxy runs (the store is opened read-only).
    """
    from stbproxy.openapi.catalog import load_for_store
    from stbproxy.openapi.drift import drift_report
    from stbproxy.openapi.traffic import PREFIX
    from stbproxy.store.embedded import Store

    try:
        catalog = load_for_store(store)
        if not catalog:
            fail(f"no OpenAPI spec is imported into {store}: add one with 'stbproxy import openapi SPEC'")
        if spec_name is not None and spec_name not in catalog.specs:
            fail(f"no spec named {spec_name!r} in {store} (imported: {', '.join(sorted(catalog.specs))})")
        with Store(store, readonly=True) as db:
            prefix = f"{PREFIX}{spec_name}/" if spec_name else PREFIX
            report = drift_report(catalog, db.scan(prefix), db.scan("log/invalid/"), spec=spec_name)
    except StbError as exc:
        fail(str(exc))
    if as_json:
        click.echo(json.dumps({"store": str(store), **report.to_dict()}, indent=2))
    else:
        _print_report(report, store)
    if strict and (report.real_drift or report.simulated_drift):
        sys.exit(1)


def _print_report(report, store: Path) -> None:
    rows = report.operations
    width = max(len("operation"), *(len(r.operation) for r in rows))
    click.echo(f"OpenAPI drift in {store}: {_count(len(rows), 'operation')}")
    click.echo(f"{'operation':<{width}}  {'stored':>6}  {'real':>5}  {'broke':>5}  {'sim.':>5}  "
               f"{'broke':>5}  method path")
    for r in rows:
        click.echo(f"{r.operation:<{width}}  {r.stored:>6}  {r.real:>5}  {r.real_broken:>5}  {r.simulated:>5}  "
                   f"{r.simulated_broken:>5}  {r.method} {r.path}")
    for r in report.real_drift:
        click.echo(f"real drift: {r.operation}: {r.real_broken} of {r.real + r.invalid_logged} real answers broke the "
                   f"schema; first: {r.first_real_problem}")
    for r in report.simulated_drift:
        click.echo(f"SIMULATED ANSWERS BREAK THE SCHEMA (a bug, please report it): {r.operation}: "
                   f"{r.simulated_broken}; first: {r.first_simulated_problem}")
    for r in rows:
        if r.undeclared:
            click.echo(f"undeclared parameters: {r.operation}: {', '.join(sorted(r.undeclared))}")
    never = report.never_called
    if never:
        click.echo(f"never called ({len(never)}): {', '.join(r.operation for r in never)}")
    if report.not_in_catalog:
        click.echo(f"{report.not_in_catalog} stored answers belong to operations no longer imported")
    click.echo(f"summary: real drift in {len(report.real_drift)}, simulated drift in {len(report.simulated_drift)}, "
               f"undeclared parameters in {sum(1 for r in rows if r.undeclared)}, never called {len(never)} "
               f"of {_count(len(rows), 'operation')}")


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}" if n == 1 else f"{n} {thing}s"
