"""How commands end when they are cut short: a reader that goes away early (`| head`), and
Ctrl-C in the middle of an import. Real `stbproxy` subprocesses, as a user's shell runs them."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import click
import pytest
from click.testing import CliRunner

from stbproxy.cli.common import SIGPIPE_EXIT, OneLineErrors, ctrl_c_between_writes
from stbproxy.store.embedded import Store
from tests.cli.test_cli_process import SCRIPT
from tests.processes import foreground

pytestmark = pytest.mark.integration


def run_with_stdout_closed(*args: str) -> subprocess.CompletedProcess:
    """The command with a standard output nobody reads any more: its first write fails
    with a broken pipe, as under `| head -1` once head has its line."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([str(SCRIPT), *args], stdout=write_end, stderr=subprocess.PIPE, text=True,
                              timeout=60, env={k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")})
    finally:
        os.close(write_end)


@pytest.mark.parametrize("command", [["stats"], ["stats", "--json"], ["sessions"], ["--help"], ["--version"]])
def test_a_reader_that_stops_early_ends_the_command_quietly_as_git_does(tmp_path, command):
    store = tmp_path / "store"
    Store(store).close()
    store_args = ["--store", str(store)] if not command[0].startswith("--") else []
    result = run_with_stdout_closed(*command, *store_args)
    assert result.stderr == ""  # neither "stbproxy: error: Broken pipe" nor "Exception ignored ..."
    assert result.returncode == SIGPIPE_EXIT  # what a shell reports for `git log | head -1`


def test_a_broken_pipe_elsewhere_than_stdout_is_still_reported():
    @click.group(cls=OneLineErrors)
    def group():
        pass

    @group.command()
    def talk():
        raise BrokenPipeError(32, "Broken pipe")  # e.g. a server that closed its socket

    result = CliRunner().invoke(group, ["talk"])
    assert result.exit_code == 1 and result.output == "stbproxy: error: Broken pipe\n"


# -- Ctrl-C in the middle of an import ---------------------------------------------------------------

def big_cache(root, files: int, entries: int):
    """A cache of the original layout, big enough to take seconds to import."""
    for n in range(files):
        folder = root / "Data" / f"tool_{n // 50}_for_Data"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"api_{n}.json").write_text(json.dumps({
            str({"city": f"city {n}", "day": i}): {"error": "", "response": "sunny, and warm"}
            for i in range(entries)}))
    return root


def stored_entries(store) -> int:
    with Store(store, readonly=True) as db:
        return sum(1 for _ in db.keys("api/"))


def interrupted_run(args: list[str], at_work, presses: int = 1) -> tuple[int, str, str]:
    """Run a command, press Ctrl-C as a terminal does (to the whole process group, workers
    too) once ``at_work(process)`` has returned, and collect how the command ended. A second
    press follows at once, as an impatient user's."""
    process = subprocess.Popen([str(SCRIPT), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True, preexec_fn=foreground)
    try:
        at_work(process)
        for _ in range(presses):
            os.killpg(process.pid, signal.SIGINT)
            time.sleep(0.01)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert "Aborted!" not in err and "Traceback" not in err and "KeyboardInterrupt" not in err, err
    return process.returncode, out, err


def writing_to(store, more: float = 0.3):
    """Waits until the command has opened the store, and ``more`` seconds: it is writing."""
    def wait(process):
        deadline = time.monotonic() + 60
        while not (store / "CURRENT").exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(more)
    return wait


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_during_an_import_says_what_was_imported_and_leaves_a_consistent_store(tmp_path, presses):
    files, entries = 6000, 20
    cache = big_cache(tmp_path / "cache", files, entries)
    # On a loaded machine the press may come before the first file is written (a correct
    # "0 entries imported"): the run is then made again, pressing later, on a new store.
    for attempt, more in enumerate((0.3, 1.5, 5.0)):
        store = tmp_path / f"store{attempt}"
        code, out, err = interrupted_run(["import", "stb-cache", str(cache), "--store", str(store)],
                                         writing_to(store, more), presses)
        # 130, or the signal itself when the second press came after the command had ended, in
        # Python's own exit: a shell reports 130 for both
        assert code in (130, -signal.SIGINT), err
        (line,) = [line for line in err.splitlines() if line.startswith("stbproxy: interrupted: ")]
        imported, done = (int(n) for n in re.match(r"stbproxy: interrupted: (\d+) entries imported from (\d+) of "
                                                      rf"{files} files, and the store at .* is consistent",
                                                      line).groups())
        assert imported == done * entries
        if done > 0:
            break
    assert 0 < done < files
    assert f"imported: {imported}, duplicates: 0" in out
    assert stored_entries(store) == imported  # flushed and closed: it opens with exactly those entries

    rest = subprocess.run([str(SCRIPT), "import", "stb-cache", str(cache), "--store", str(store)],
                          capture_output=True, text=True, timeout=300)
    assert rest.returncode == 0, rest.stderr
    assert f"imported: {files * entries - imported}, duplicates: {imported}" in rest.stdout
    assert stored_entries(store) == files * entries


WIND_DOWN = """
import os, signal, sys, threading
from pathlib import Path
from stbproxy.cli.common import ctrl_c_between_writes
from stbproxy.stb_cache.importer import cache_files, encoded_files

root = Path(sys.argv[1])
with ctrl_c_between_writes() as ctrl_c, ctrl_c.stoppable():
    files = encoded_files(cache_files(root), root, catalog_file=None, now=0, jobs=2,
                          shield=ctrl_c.holding)
    next(files)
    ctrl_c.presses = 1  # the first press: the import stops at its next file and closes the encoder
    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
    try:
        files.close()  # the workers are busy with their next files, which the shutdown waits for
    except KeyboardInterrupt:
        print("second press taken after the workers ended", flush=True)
sys.exit(130)
"""


def test_a_second_ctrl_c_while_the_import_workers_wind_down_neither_breaks_nor_hangs_the_exit(tmp_path):
    """On Python 3.11 a KeyboardInterrupt that lands in a process pool's shutdown (a thread
    join) leaves a thread that can never be joined, and the process hangs at exit: the
    import runs that shutdown where a press is held until it is over."""
    cache = big_cache(tmp_path / "cache", 24, 3000)  # tasks of 8 files that take a while to encode
    started = time.monotonic()
    ended = subprocess.run([sys.executable, "-c", WIND_DOWN, str(cache)], capture_output=True, text=True, timeout=60)
    assert ended.returncode == 130, ended.stderr
    assert ended.stdout == "second press taken after the workers ended\n"
    assert time.monotonic() - started < 30


def test_a_second_ctrl_c_inside_a_finalizer_stops_at_the_end_of_the_next_write():
    """Python prints and drops an exception raised where nothing can catch it (a progress
    bar's __del__, a weak reference's callback): the press is kept for the end of the next
    write, and nothing is printed."""
    import weakref

    class Collected:
        def __del__(self):
            ctrl_c.on_signal(signal.SIGINT, None)

    class Referent:
        pass

    before = sys.unraisablehook
    with ctrl_c_between_writes() as ctrl_c:
        ctrl_c.presses = 1  # the first press asked the loop to stop at its next file
        with ctrl_c.stoppable():
            Collected()  # collected at once: its __del__ takes the second press
            referent = Referent()
            watching = weakref.ref(referent, lambda _ref: ctrl_c.on_signal(signal.SIGINT, None))
            del referent  # the callback takes a third
            assert ctrl_c.presses == 3 and watching() is None
            with pytest.raises(KeyboardInterrupt):
                with ctrl_c.holding():
                    pass
            with pytest.raises(KeyboardInterrupt):  # outside a finalizer, a further press stops at once
                ctrl_c.on_signal(signal.SIGINT, None)
    assert sys.unraisablehook is before


def json_cassettes(folder, files: int, interactions: int) -> list[str]:
    """vcrpy cassettes (JSON) of plain GETs, every interaction another URL."""
    folder.mkdir(parents=True)
    paths = []
    for n in range(files):
        path = folder / f"run_{n}.json"
        path.write_text(json.dumps({"version": 1, "interactions": [{
            "request": {"method": "GET", "uri": f"http://api.example/items?file={n}&item={i}", "body": None,
                        "headers": {}},
            "response": {"status": {"code": 200, "message": "OK"}, "headers": {"Content-Type": ["text/plain"]},
                         "body": {"string": "fine"}}} for i in range(interactions)]}))
        paths.append(str(path))
    return paths


def test_ctrl_c_during_a_cassette_import_stops_between_interactions(tmp_path):
    cassettes, store = json_cassettes(tmp_path / "cassettes", 100, 100), tmp_path / "store"
    code, _out, err = interrupted_run(["import", "cassette", *cassettes, "--store", str(store), "--session", "s"],
                                      writing_to(store))
    assert code == 130, err
    imported, logged, done = (int(n) for n in re.search(
        r"stbproxy: interrupted: (\d+) interactions imported \((\d+) calls logged in session s\), (\d+) of 100 "
        r"files whole, and the store at .* is consistent", err).groups())
    assert 0 < imported < 100 * 100 and done == imported // 100 and logged == imported
    with Store(store, readonly=True) as db:  # each entry with its session record, no more, no fewer
        assert sum(1 for _ in db.keys("http/")) == imported == len(list(db.session_records("s")))


def test_a_cassette_import_cut_short_then_run_again_logs_each_call_once(tmp_path):
    # One big cassette, as `import cassette big.json --session big2`, Ctrl-C, and the same command again.
    total = 40000
    (cassette,), store = json_cassettes(tmp_path / "cassettes", 1, total), tmp_path / "store"
    args = ["import", "cassette", cassette, "--store", str(store), "--session", "big2"]

    def logging(process):  # until the first batch is in RocksDB's write-ahead log
        deadline = time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline and not any(
                log.stat().st_size for log in store.glob("*.log")):
            time.sleep(0.02)

    code, _out, err = interrupted_run(args, logging)
    assert code == 130 and "0 of 1 files whole" in err, err
    first = int(re.search(r"\((\d+) calls logged in session big2\)", err).group(1))
    assert 0 < first < total
    rerun = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert (f"imported: {total - first}, duplicates: {first}, problems: 0; session big2: {total - first} calls "
            f"logged, {first} were logged already") in rerun.stdout
    with Store(store, readonly=True) as db:  # every interaction once, in the cassette's order
        assert [r["interaction"] for r in db.session_records("big2")] == list(range(total))
        assert sum(1 for _ in db.keys("http/")) == total


def tool_docs(tools, count: int, apis: int = 3):
    for n in range(count):
        doc = tools / "Data" / f"tool_{n}.json"
        doc.parent.mkdir(parents=True, exist_ok=True)
        doc.write_text(json.dumps({"tool_name": f"Tool {n}", "api_list": [
            {"name": f"get item {a}", "url": f"https://tool-{n}.p.rapidapi.com/items/{a}", "method": "GET"}
            for a in range(apis)]}))
    return tools


def test_ctrl_c_during_a_tools_import_leaves_the_catalog_as_it_was(tmp_path):
    # the big source takes seconds to read, so Ctrl-C finds it at work even on a loaded machine
    small, big = tool_docs(tmp_path / "small" / "tools", 1, 1), tool_docs(tmp_path / "big" / "tools", 4000, 15)
    catalog = tmp_path / "catalog.json"
    first: list[str] = []
    # the small source is read first and says so; Ctrl-C then comes while the big one is read
    code, _out, err = interrupted_run(["import", "tools", str(small), str(big), "--catalog", str(catalog)],
                                      lambda process: first.append(process.stdout.readline()))
    assert "1 APIs loaded" in first[0] and code == 130
    assert err.strip() == f"stbproxy: interrupted: nothing saved: the catalog {catalog} is as it was"
    assert not catalog.exists()
