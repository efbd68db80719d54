"""Every command shown in README.md and docs/*.md runs, so the docs cannot rot.

Each page's shell and Python blocks run in order in a folder of their own that looks like a
StableToolBench checkout (query files, tool docs, a response cache, pipeline answers;
all small and made up, see tests/stb_samples.py) and holds a copy of the clone's
examples/ (the README's tour runs on examples/stb-sample/), against real ``stbproxy serve``
processes on loopback, with a loopback fake as the LLM judge. How blocks are found and
run, and the markers a page uses for a block that cannot run here, are in
tests/docblocks.py. docs/clients.md is run by tests/proxy/test_client_recipes.py, through a
proxy in front of a TLS upstream. Besides: every marker gives its reason, every
relative link and #anchor resolves, and the README stays short.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.docblocks import PAGES, REPO, Block, PageRun, blocks, import_problems, missing_needs
from tests.fakes.fake_openai import FakeOpenAI, ToolCall
from tests.stb_samples import QUERIES, reference_entry, write_json, write_sample_stb

RUN_ELSEWHERE = {"docs/clients.md": "tests/proxy/test_client_recipes.py"}
README_MAX_LINES = 250


# -- the folder a page's commands run in ----------------------------------------------------------


def cache_file(root: Path, relative: str, entries: dict[str, object]) -> None:
    write_json(root / "server" / "tool_response_cache" / relative, entries)


def stb_workspace(root: Path) -> Path:
    """A small StableToolBench checkout: what the pages' commands name, and nothing real;
    with the clone's examples/ (the README's tour reads examples/stb-sample/ from there)."""
    write_sample_stb(root)
    shutil.copytree(REPO / "examples", root / "examples")
    # StableToolBench's response cache: <category>/<tool>_for_<category>/<api>.json, keys str(dict)
    cache_file(root, "Data/theclique_for_Data/songkick_concert.json", {
        "{'id_conc': '1-band-at-a-hall'}": {"error": "", "response": {
            "date": "2024-05-01", "name": "One band at a hall", "venue_name": "The Hall",
            "line_up": [{"link": "https://example.org/a", "name": "A band"}]}},
        "{'id_conc': '3-quartet-live'}": {"error": "", "response": {
            "date": "2024-06-12", "name": "Quartet live", "venue_name": "Open air",
            "line_up": [{"link": "https://example.org/q", "name": "The quartet"}]}}})
    cache_file(root, "Sports/free_nba_for_Sports/get_a_specific_team.json", {
        "{'is_id': '14'}": {"error": "", "response": {"id": 14, "abbreviation": "LAL", "city": "Los Angeles",
                                                      "conference": "West", "full_name": "Los Angeles Lakers"}}})
    # ToolBench's tool docs (data/toolenv/tools/<Category>/<tool>.json): RapidAPI URLs only, so
    # that a /virtual miss never leaves the machine (no $STBPROXY_RAPIDAPI_KEY is set here)
    write_json(root / "data" / "toolenv" / "tools" / "Data" / "theclique.json", {
        "tool_name": "TheClique", "tool_description": "Concerts and artists.", "api_list": [{
            "name": "Songkick concert", "url": "https://theclique.p.rapidapi.com/songkick/concert/{id_conc}",
            "method": "GET", "description": "A concert by its id.",
            "required_parameters": [{"name": "id_conc", "type": "STRING", "description": "concert id",
                                     "default": "1-band-at-a-hall"}],
            "optional_parameters": []}]})
    write_json(root / "data" / "toolenv" / "tools" / "Sports" / "free_nba.json", {
        "tool_name": "Free NBA", "tool_description": "NBA teams and games.", "api_list": [{
            "name": "Get a Specific Team", "url": "https://free-nba.p.rapidapi.com/teams/{id}",
            "method": "GET", "description": "A team by its id.",
            "required_parameters": [{"name": "id", "type": "STRING", "description": "the team's id", "default": "1"}],
            "optional_parameters": []}]})
    # the MirrorAPI server's system prompts (made up here), which `--stb-dir .` reads
    prompts = root / "server" / "system_prompts.py"
    prompts.write_text('SFT_SYSTEM = "You stand in for an API (a made-up prompt)."\n'
                       'COT_SYSTEM = "Think about the API first (a made-up prompt)."\n', encoding="utf-8")
    # the answers StableToolBench's pipeline writes, where its scripts write them
    answers = root / "data" / "answer" / "virtual_chatgpt_cot" / "G1_instruction"
    shutil.copytree(root / "pipeline_answers_tool_calls" / "G1_instruction", answers)
    # converted reference answers, as StableToolBench publishes them (one file per group)
    queries = json.loads((root / QUERIES / "G1_instruction.json").read_text(encoding="utf-8"))
    write_json(root / "reference_answers_gpt-3.5-turbo_CoT" / "G1_instruction.json", {
        str(q["query_id"]): reference_entry(q["query"], [("get_a_specific_team_for_free_nba", '{"is_id": "14"}')],
                                            f"The answer to query {q['query_id']}.") for q in queries[:3]})
    return root


def judge(request: dict) -> object:
    """A judge that finds every answer solved and every task solvable; plain text otherwise."""
    choice = request.get("tool_choice")
    name = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    if name in ("check_answer_status", "parse_answer_status"):
        return ToolCall(name, {"reason": "the fake judge says so", "answer_status": "Solved"})
    if name == "check_task_solvable":
        return ToolCall(name, {"reason": "the fake judge says so", "task_status": "Solvable"})
    if name == "select_better_answer":
        return ToolCall(name, {"reason": "the fake judge says so", "index": 0})
    return json.dumps({"error": "", "response": "a reply of the fake LLM"})


@pytest.fixture(scope="module")
def fake_judge():
    with FakeOpenAI(judge) as server:
        yield server


def page_id(page: Path) -> str:
    return str(page.relative_to(REPO))


# -- the pages' commands ---------------------------------------------------------------------------


PAGES_RUN_HERE = [p for p in PAGES if page_id(p) not in RUN_ELSEWHERE]
PARALLEL_PAGES = 2  # pages run side by side: most of a page's time is waiting for processes to start
PAGE_TIMEOUT = 300  # one page's blocks, each bounded by its own timeout in tests/docblocks.py


def run_page(page: Path, folder: Path, judge_url: str) -> tuple[str | None, str]:
    """Run every unmarked command of ``page``; (the first failure, or None; what ran, how long)."""
    folder = stb_workspace(folder)
    run = PageRun(folder, env={"OPENAI_BASE_URL": judge_url, "OPENAI_API_KEY": "sk-fake-judge",
                               # the judge is configured, but the proxy's simulator stays the offline one
                               "STBPROXY_SERVE_SIMULATOR": "schema"})
    ran, started = 0, time.monotonic()
    try:
        for block in blocks(page):
            if block.not_run is not None:
                continue
            if block.file_name:
                run.write_file(block)
                continue
            if not block.is_command:
                continue
            result = run.run(block)
            ran += 1
            if result.returncode != 0:
                return (f"the block at {block.where} (under '{block.section}') failed with status "
                        f"{result.returncode}:\n{block.code}\n--- its output ---\n{result.stdout[-6000:]}"), ""
    finally:
        run.close()
    return None, f"{page_id(page)}: ran {ran} blocks in {time.monotonic() - started:.1f} s"


@pytest.fixture(scope="module")
def page_runs(request, tmp_path_factory, fake_judge):
    """The selected pages' commands, started two pages at a time, each in a folder of its own.

    The pages run in the background: each test waits for its own page only, so a test's
    time limit covers one page, not the whole module's.
    """
    selected = [item.callspec.params["page"] for item in request.session.items
                if getattr(item, "originalname", "") == "test_every_command_of_the_page_runs"]
    pool = ThreadPoolExecutor(PARALLEL_PAGES)
    try:
        yield {page: pool.submit(run_page, page, tmp_path_factory.mktemp("page") / "work", fake_judge.base_url)
               for page in selected}
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.timeout(PAGE_TIMEOUT)
@pytest.mark.parametrize("page", PAGES_RUN_HERE, ids=page_id)
def test_every_command_of_the_page_runs(page, page_runs):
    failure, summary = page_runs[page].result()
    assert failure is None, failure
    print(summary)


# -- markers, links and length -----------------------------------------------------------------------


def test_every_not_run_marker_gives_a_reason_and_stands_before_a_command():
    for page in PAGES:
        for block in blocks(page):
            if block.not_run is not None:
                assert block.not_run, f"{block.where}: '<!-- not run: -->' without a reason"
                assert block.is_command, f"{block.where}: a not-run marker before a block that is no command"


# -- Python blocks ------------------------------------------------------------------------------------

# A Python block is run like a shell block: in its page's folder, after the blocks above it
# (so a snippet that reads `run-42.yaml` reads the cassette the page exported). One that cannot
# run here says which kind of exception it is, first in its marker's reason
# (`<!-- not run: fragment: ... -->`); it is still compiled and its imports are run, so a
# renamed module or function still fails (cassettes.md once imported stbproxy.inprocess, a
# module that never existed). These are the only kinds, and why each is allowed:
PYTHON_NOT_RUN_KINDS = {
    # It calls names the reader brings (their own agent, store, upstream): a stand-in for
    # them would test the stand-in, and the page shows how to call stbproxy, not an agent.
    "fragment": "names the reader supplies",
    # It needs what a test machine has not (a hosted LLM, a real RapidAPI key, a network);
    # a loopback fake would not show that the real one answers as the page says.
    "needs": "a service the test machine has not",
}


def python_blocks() -> list[Block]:
    return [b for page in PAGES for b in blocks(page) if b.is_python]


def test_every_python_block_compiles():
    problems = []
    for block in python_blocks():
        try:
            compile(block.code, block.where, "exec")
        except SyntaxError as exc:
            problems.append(f"{block.where}: {exc}")
    assert not problems, "\n".join(problems)


def test_a_python_block_that_is_not_run_says_which_kind_of_exception_it_is():
    for block in python_blocks():
        if block.not_run is not None:
            kind = block.not_run.split(":", 1)[0].strip()
            assert kind in PYTHON_NOT_RUN_KINDS and block.not_run.split(":", 1)[1:] != [""], (
                f"{block.where}: a Python block not run says why as '<!-- not run: KIND: WHY -->', KIND one of "
                f"{', '.join(PYTHON_NOT_RUN_KINDS)} (tests/house/test_docs_commands.py says when each is allowed); "
                f"it says {block.not_run!r}")


NOT_RUN_PYTHON = [b for b in python_blocks() if b.not_run is not None]


@pytest.mark.parametrize("block", NOT_RUN_PYTHON, ids=lambda b: b.where)
def test_a_python_block_that_is_not_run_still_imports_what_it_imports(block):
    if (missing := missing_needs(block)) is not None:
        pytest.skip(missing)
    problem = import_problems(block)
    assert problem is None, problem


def test_the_import_check_finds_a_module_or_name_that_does_not_exist():
    """What found cassettes.md's `from stbproxy.inprocess import replay` (the module is
    stbproxy.cassettes.inprocess): a wrong module, and a wrong name in a right one."""
    def block(code: str) -> Block:
        return Block(REPO / "docs" / "cassettes.md", 1, "python", code)

    assert "No module named 'stbproxy.inprocess'" in import_problems(block("from stbproxy.inprocess import replay\n"))
    assert "stbproxy.cassettes.inprocess.no_such_name" in import_problems(
        block("def f():\n    from stbproxy.cassettes.inprocess import no_such_name\n"))
    assert import_problems(block("from stbproxy.cassettes.inprocess import replay\nrun_agent()\n")) is None
    assert "does not compile" in import_problems(block("with replay(:\n"))


def test_every_saved_file_is_run_by_a_later_block_of_its_page():
    """A `# file: NAME` block is saved for a command after it; one that no command names is
    never run, and could rot."""
    problems = []
    for page in PAGES:
        if page_id(page) in RUN_ELSEWHERE:
            continue
        found = blocks(page)
        for i, block in enumerate(found):
            name = block.file_name
            if name is None or block.not_run is not None:
                continue
            later = [b for b in found[i + 1:] if b.is_command and b.not_run is None]
            if not any(name in b.code for b in later):
                problems.append(f"{block.where}: {name} is saved, but no later command of the page runs it")
    assert not problems, "\n".join(problems)


def test_every_page_with_commands_is_run_somewhere():
    for page, runner in RUN_ELSEWHERE.items():
        assert (REPO / page).is_file() and (REPO / runner).is_file()
        assert page in (REPO / runner).read_text(encoding="utf-8")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    out, seen, fenced = set(), {}, False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced and (m := re.match(r"^#{1,6}\s+(.*)$", line)):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_every_relative_link_and_anchor_resolves():
    problems = []
    for page in PAGES:
        fenced = False
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
            if fenced:
                continue
            for target in _LINK.findall(line):
                if re.match(r"^[a-z]+:", target):  # https:, mailto:
                    continue
                path, _, anchor = target.partition("#")
                file = (page.parent / path).resolve() if path else page
                where = f"{page_id(page)}:{number}: {target}"
                if not file.exists():
                    problems.append(f"{where}: no such file")
                elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                    problems.append(f"{where}: no heading with that anchor in {file.relative_to(REPO)}")
    assert not problems, "\n".join(problems)


def test_the_readme_is_short():
    lines = (REPO / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; the rest belongs in docs/"
