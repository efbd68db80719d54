"""The client recipes of docs/clients.md, run through a real proxy.

One ``stbproxy serve`` sits in front of a TLS server on loopback that plays
``https://api.example.com`` (the proxy trusts its test CA with ``--upstream-ca``), and a
loopback fake plays the local OpenAI-compatible server on port 8000. Each recipe (a
``###`` section) runs in a folder of its own: its files are written, its shell blocks run
as the page says (``eval "$(stbproxy env)"`` included, so the client trusts the proxy's CA
only through the variables that command exports), and whatever the client printed must
name ``X-Stb-Source``'s value, which only an answer through the proxy carries. A recipe
whose client is missing here (``<!-- needs: ... -->``) skips, naming it; so does the Node
recipe when ``npm install undici`` cannot reach the registry.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.docblocks import REPO, PageRun, blocks, missing_needs
from tests.fakes.fake_openai import FakeOpenAI
from tests.servers import ProxyProcess, Upstream

PAGE = REPO / "docs" / "clients.md"  # run here, not by tests/house/test_docs_commands.py
RECIPES: dict[str, list] = {}
for _block in blocks(PAGE):
    if _block.section and (_block.file_name or (_block.is_command and _block.not_run is None)):
        RECIPES.setdefault(_block.section, []).append(_block)
# a section whose commands are all marked (Node 24's) has nothing to run here
RECIPES = {s: bs for s, bs in RECIPES.items() if any(b.is_command for b in bs)}
_CLIENT = re.compile(r"^\s*(python|node|curl)\b", re.M)


@pytest.fixture(scope="module")
def proxied(tmp_path_factory, test_ca):
    folder = tmp_path_factory.mktemp("recipes")
    with Upstream(tls=test_ca) as api, FakeOpenAI(lambda request: "Hello from the local model.") as llm, \
            ProxyProcess(folder / "store", "--upstream-ca", str(test_ca.ca_file)) as proxy:
        yield folder, api, llm, proxy


@pytest.mark.parametrize("section", list(RECIPES), ids=lambda s: re.sub(r"\W+", "-", s).strip("-"))
def test_recipe_runs_through_the_proxy(section, proxied, tmp_path):
    _, api, llm, proxy = proxied
    recipe = RECIPES[section]
    for block in recipe:
        if (why := missing_needs(block)) is not None:
            pytest.skip(why)
    run = PageRun(tmp_path, ports={"8080": proxy.port, "8000": llm.port},
                  replace={"https://api.example.com": api.base},
                  env={"STBPROXY_CONFDIR": str(proxy.confdir)})  # `stbproxy env` names this proxy's CA
    try:
        for block in recipe:
            if block.file_name:
                run.write_file(block)
                continue
            if "npm install" in block.code:
                installed = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "undici"], cwd=tmp_path,
                                           env=run.env, capture_output=True, text=True, timeout=120)
                if installed.returncode != 0:
                    pytest.skip(f"npm install undici failed (is the npm registry reachable?): "
                                f"{installed.stderr.strip()[-300:]}")
            result = run.run(block)
            assert result.returncode == 0, f"{block.where} failed:\n{block.code}\n--- output ---\n{result.stdout}"
            assert not _CLIENT.search(block.code) or re.search(r"\b(upstream|cache)\b", result.stdout, re.I), (
                f"{block.where}: the client's answer did not come through the proxy:\n{result.stdout}")
    finally:
        run.close()
