"""The click commands, through click's runner (no proxy process needed)."""

import json
import os
import stat

import pytest
from click.testing import CliRunner

from stbproxy.cli import main
from stbproxy.models import Exchange, Request, Response, Source
from stbproxy.store.embedded import Store


def invoke(*args, env=None):
    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    return result


def test_version_and_help_on_every_command():
    assert "stbproxy, version" in invoke("--version").output
    for command in (["serve"], ["env"], ["stats"], ["import"], ["import", "stb-cache"], ["import", "tools"]):
        result = invoke(*command, "--help")
        assert result.exit_code == 0 and "Usage:" in result.output


def test_env_prints_proxy_and_ca_lines_and_creates_the_ca(tmp_path):
    confdir = tmp_path / "conf"
    result = invoke("env", "--port", "9123", "--confdir", str(confdir))
    assert result.exit_code == 0
    comment, *exports = result.output.splitlines()
    # a comment first (eval ignores it): which real answers a proxy in virtual mode replaces
    assert comment == ("# stbproxy: in virtual mode (serve's default) the proxy replaces real 4xx/5xx answers "
                       "(StableToolBench calls: check_result failures; kept: 4xx an OpenAPI document lists) with "
                       "simulated ones (serve --keep-status 404,410 keeps those too); X-Stb-Source says who answered")
    lines = dict(line.removeprefix("export ").split("=", 1) for line in exports)
    assert lines["HTTP_PROXY"] == lines["HTTPS_PROXY"] == lines["https_proxy"] == "http://127.0.0.1:9123"
    ca = confdir / "mitmproxy-ca-cert.pem"
    assert lines["NODE_EXTRA_CA_CERTS"] == str(ca) and ca.is_file()  # Node adds it to its own roots
    # The others replace a client's roots: a bundle of the proxy's CA and the roots trusted before.
    bundle = lines["REQUESTS_CA_BUNDLE"]
    assert bundle == lines["SSL_CERT_FILE"] == lines["CURL_CA_BUNDLE"] != str(ca)
    assert os.path.dirname(bundle) == str(confdir) and ca.read_text().strip() in open(bundle).read()
    for private in (confdir / "mitmproxy-ca.pem", bundle):
        assert stat.S_IMODE(os.stat(private).st_mode) & 0o077 == 0


def test_store_option_reads_the_environment(tmp_path):
    store = tmp_path / "envstore"
    with Store(store) as db:
        db.put(Exchange("http/h/GET/p/1", Request("GET", "http://h/p"), Response(200, (), b"{}"), Source.UPSTREAM, 1.0,
                        meta={"failure": "success"}))
    result = invoke("stats", "--json", env={"STBPROXY_STORE": str(store)})
    assert json.loads(result.output)["entries"] == 1


def test_stats_after_one_recorded_call_counts_in_words_and_says_what_logged_records_are(tmp_path):
    store = tmp_path / "tour"
    answer = Exchange("http/127.0.0.1:8000/GET/forecast.json/1", Request("GET", "http://127.0.0.1:8000/forecast.json"),
                      Response(200, (), b"{}"), Source.UPSTREAM, 1.0)
    with Store(store) as db:  # what one call in record mode leaves: its entry, the session's copy, a record
        db.put(answer)
        db.put(Exchange("log/upstream/1", answer.request, answer.response, Source.UPSTREAM, 1.0))
        db.append_session("tour", {"time": 1.0, "source": "upstream", "key": "log/upstream/1", "seconds": 0.1})
    lines = invoke("stats", "--store", str(store)).output.splitlines()
    assert lines[0].startswith(f"store {store}: 1 entry to serve, 1 logged record (copies kept for the record and "
                               "never served; 'logged' below says what), ")
    assert lines[-2:] == [
        "logged (never served)                                                             count   share",
        "upstream: record mode's copy of each answer, for its session's ordered replay         1  100.0%"]
    with Store(store) as db:
        db.delete("log/upstream/1")
        db.put(Exchange("http/h/GET/p/2", Request("GET", "http://h/p"), Response(200), Source.UPSTREAM, 1.0))
    assert invoke("stats", "--store", str(store)).output.startswith(f"store {store}: 2 entries to serve, 0 logged "
                                                                    "records, ")


def test_stats_errors_prints_the_taxonomy(tmp_path):
    store = tmp_path / "s"
    with Store(store) as db:
        for i, failure in enumerate(["success"] * 3 + ["not_connected", "not_found", "not_authorised"]):
            db.put(Exchange(f"http/h/GET/p/{i}", Request("GET", f"http://h/p?{i}"), Response(200, (), b"{}"),
                            Source.UPSTREAM, 1.0, meta={"failure": failure}))
        db.put(Exchange("http/h/GET/p/x", Request("GET", "http://h/p?x"), Response(200, (), b"{}"), Source.SIMULATED,
                        1.0, meta={"fault": "down=0.2"}))
    table = invoke("stats", "--errors", "--store", str(store))
    assert table.exit_code == 0
    lines = table.output.splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:9]}
    assert rows["success"] == ["3", "50.0%"] and rows["not_available"] == ["2", "33.3%"]
    assert rows["not_connected"] == ["1", "50.0%"]  # a share of the not-available answers
    assert lines[10:] == ["injected (--faults, not real failures, not counted above): 1",
                          "  down=0.2                                      1"]
    as_json = json.loads(invoke("stats", "--errors", "--json", "--store", str(store)).output)
    assert {row["kind"]: row["count"] for row in as_json["real"]}["not_authorised"] == 1
    assert as_json["injected"] == {"total": 1, "by_rule": {"down=0.2": 1}}


def test_stats_on_a_missing_store_is_a_clear_error(tmp_path):
    result = CliRunner().invoke(main, ["stats", "--store", str(tmp_path / "none")])
    assert result.exit_code == 2 and result.output.startswith("stbproxy: error: no store at")


def test_import_tools_builds_the_catalog_in_the_store(tmp_path, stb_data):
    store = tmp_path / "run" / "store"
    queries = stb_data / "solvable_queries" / "test_instruction" / "G1_instruction.json"
    result = invoke("import", "tools", str(queries), "--store", str(store))
    assert result.exit_code == 0, result.output
    catalog = store / "catalog.json"
    assert catalog.is_file() and "APIs" in result.output
    again = invoke("import", "tools", str(queries), "--store", str(store))
    assert "(0 new)" in again.output


@pytest.mark.parametrize("args,line", [
    (["--faults", "status=999"], "stbproxy: error: --faults: bad fault spec 'status=999'"),
    (["--faults", ""], "stbproxy: error: --faults: empty fault spec '': it names no failure"),
    (["--faults", "down=0.1", "--faults", ";"], "stbproxy: error: --faults: bad fault spec ';': it has an empty rule"),
    (["--faults", "p=0.5"], "stbproxy: error: --faults: bad fault spec 'p=0.5': 'p=0.5' is a scope, not a fault kind"),
    (["--mode", "replay", "--refresh-simulated"],
     "stbproxy: error: --refresh-simulated: refreshing simulated answers needs mode virtual"),
    (["--session", "../x"], "stbproxy: error: --session: session name '../x' must use only"),
    (["--secret-field", "x", "--volatile-field", "y", "--validity", "lenient"],
     "stbproxy: error: Invalid value for '--validity'"),
    (["--upstream-proxy", "proxy.local:3128"], "stbproxy: error: --upstream-proxy: 'proxy.local:3128' is not a URL"),
    (["--toolbench-url", "/virtual"], "stbproxy: error: --toolbench-url: '/virtual' is not a URL such as http://"),
])
def test_serve_refuses_bad_settings_in_one_line_naming_the_flag(tmp_path, args, line):
    result = CliRunner().invoke(main, ["serve", "--store", str(tmp_path / "s"), "--port", "0", *args])
    assert result.exit_code == 2 and result.output.startswith(line) and len(result.output.splitlines()) == 1
    assert not (tmp_path / "s").exists()  # refused before anything was opened


def test_an_upstream_ca_that_holds_no_certificate_is_one_line(tmp_path):
    bundle = tmp_path / "ca.pem"
    bundle.write_text("not a certificate\n")
    result = CliRunner().invoke(main, ["serve", "--store", str(tmp_path / "s"), "--port", "0",
                                       "--upstream-ca", str(bundle)])
    assert result.exit_code == 2 and len(result.output.splitlines()) == 1
    assert result.output.startswith(f"stbproxy: error: the upstream CA bundle {bundle} is not usable")


def test_every_option_reads_stbproxy_command_option_variables(tmp_path):
    result = invoke("env", env={"STBPROXY_ENV_PORT": "9555", "STBPROXY_ENV_SESSION": "nightly"})
    assert "export HTTP_PROXY=http://nightly:@127.0.0.1:9555" in result.output


def test_the_evaluation_package_loads_only_for_eval():
    """Every other command starts without importing stbeval (and vcrpy): half a second each."""
    import subprocess
    import sys

    probe = ("import sys\n"
             "from click.testing import CliRunner\n"
             "from stbproxy.cli import main\n"
             "assert CliRunner().invoke(main, ['stats', '--help']).exit_code == 0\n"
             "print('stbeval.cli' in sys.modules)\n"
             "result = CliRunner().invoke(main, ['eval', 'pass-rate', '--help'])\n"
             "print('stbeval.cli' in sys.modules, 'STBPROXY_EVAL_PASS_RATE_STORE' in result.output)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["False", "True True"]


def test_import_tools_run_first_makes_the_store_folder_owner_only(tmp_path, stb_data):
    store = tmp_path / "runs" / "store"
    result = invoke("import", "tools", str(stb_data / "solvable_queries" / "test_instruction" / "G1_instruction.json"),
                    "--store", str(store))
    assert result.exit_code == 0, result.output
    assert (store / "catalog.json").exists() and stat.S_IMODE(store.stat().st_mode) == 0o700
