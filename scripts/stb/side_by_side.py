"""StableToolBench's own virtual server on the parity scenario (tests/stb_server/scenario.py):
what it answers to every step is written to tests/stb_server/recorded.json, which the
parity tests hold stbproxy's drop-in and transparent modes to.

    python scripts/stb/side_by_side.py --stb-checkout ~/StableToolBench --python ~/stb-venv/bin/python
    python scripts/stb/side_by_side.py ... --check     # compare with recorded.json, write nothing

``--stb-checkout``: an unmodified checkout of StableToolBench; its ``server/`` folder is
copied into a temporary folder (the checkout is never written to), given a config.yml that
points it at the scenario's seed cache, the loopback real APIs (RealApi) and the fake
simulator model, and started as its README says (``uvicorn main:app``) with ``--python``,
an interpreter that has its server's requirements (fastapi, pydantic 1, uvicorn, slowapi,
openai, requests, pyyaml). Nothing of StableToolBench is copied into this repository: only
what its server answered.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import requests  # noqa: E402

from scripts.common import child_env, free_port  # noqa: E402
from tests.conftest import STB_DATA  # noqa: E402
from tests.fakes.fake_openai import FakeOpenAI  # noqa: E402
from tests.pipeline_run import PipelineLlm, Script, run_queries  # noqa: E402
from tests.stb_server import scenario  # noqa: E402

CONFIG = """\
api_key: fake-key
api_base: {api_base}
model: {model}
temperature: 0
toolbench_url: {toolbench_url}
tools_folder: "{tools}"
cache_folder: "{cache}"
is_save: true
port: {port}
log_file: "{log}"
"""


class StbServer:
    """StableToolBench's server from a checkout, in a temporary copy, on a free port."""

    def __init__(self, checkout: Path, python: str, folder: Path, cache: dict, real: scenario.RealApi,
                 model: FakeOpenAI) -> None:
        self.folder = folder
        shutil.copytree(checkout / "server", folder / "server")
        scenario.write_cache(folder / "cache", cache)
        (folder / "tools").mkdir()
        self.port = free_port()
        (folder / "server" / "config.yml").write_text(CONFIG.format(
            api_base=model.base_url, model=scenario.SIM_MODEL, toolbench_url=real.url, tools=folder / "tools",
            cache=folder / "cache", port=self.port, log=folder / "server.log"))
        self.log = open(folder / "uvicorn.log", "w")
        self.process = subprocess.Popen([python, "-m", "uvicorn", "main:app", "--host", "127.0.0.1",
                                         "--port", str(self.port)], cwd=folder / "server", env=child_env(),
                                        stdout=self.log, stderr=subprocess.STDOUT)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/virtual"

    def __enter__(self) -> StbServer:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                sys.exit(f"StableToolBench's server exited: {(self.folder / 'uvicorn.log').read_text()[-2000:]}")
            try:
                requests.get(f"http://127.0.0.1:{self.port}/docs", timeout=1)
                return self
            except requests.ConnectionError:
                time.sleep(0.2)
        sys.exit("StableToolBench's server did not start in 60 s")

    def __exit__(self, *exc: object) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
        self.log.close()


def run_calls(checkout: Path, python: str) -> dict:
    with tempfile.TemporaryDirectory() as folder, scenario.RealApi(scenario.calls_real_answer) as real, \
            FakeOpenAI(scenario.simulator_model) as model, \
            StbServer(checkout, python, Path(folder), scenario.CALLS_CACHE, real, model) as server:
        seen = scenario.play(scenario.CALLS, server.url, real, model)
        return {name: step.to_dict() for name, step in seen.items()}


def run_pipeline(checkout: Path, python: str) -> dict:
    script = Script.load(STB_DATA)
    with tempfile.TemporaryDirectory() as folder, \
            scenario.RealApi(lambda call: scenario.pipeline_real_answer(script, call)) as real, \
            FakeOpenAI(scenario.simulator_model) as model, FakeOpenAI(PipelineLlm(script)) as agent, \
            StbServer(checkout, python, Path(folder), scenario.pipeline_cache(script), real, model) as server:
        histories = run_queries(script, sorted(script.items), llm_base_url=agent.base_url, tools="virtual",
                                service_url=server.url)
        return {"histories": histories, "real_calls": len(real.calls), "model_calls": model.calls}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stb-checkout", type=Path, required=True)
    parser.add_argument("--python", default=sys.executable,
                        help="an interpreter with StableToolBench's server's requirements")
    parser.add_argument("--check", action="store_true", help="compare with recorded.json instead of writing it")
    args = parser.parse_args()
    if not (args.stb_checkout / "server" / "main.py").exists():
        sys.exit(f"{args.stb_checkout} is not a StableToolBench checkout (no server/main.py)")
    commit = subprocess.run(["git", "-C", str(args.stb_checkout), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    recorded = {
        "about": f"What StableToolBench's server (commit {commit}, server/main.py under uvicorn) answered to "
                 "tests/stb_server/scenario.py; written by scripts/stb/side_by_side.py.",
        "calls": run_calls(args.stb_checkout, args.python),
        "pipeline": run_pipeline(args.stb_checkout, args.python),
    }
    if args.check:
        before = json.loads(scenario.RECORDED.read_text())
        differ = [name for name in recorded["calls"] if recorded["calls"][name] != before["calls"].get(name)]
        same_pipeline = recorded["pipeline"] == before["pipeline"]
        print(f"calls: {len(recorded['calls']) - len(differ)} of {len(recorded['calls'])} as recorded"
              + (f"; differ: {', '.join(differ)}" if differ else ""))
        print(f"pipeline: {'as recorded' if same_pipeline else 'differs from recorded.json'}")
        sys.exit(1 if differ or not same_pipeline else 0)
    scenario.RECORDED.write_text(json.dumps(recorded, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {scenario.RECORDED}: {len(recorded['calls'])} calls, "
          f"{len(recorded['pipeline']['histories'])} pipeline queries")


if __name__ == "__main__":
    os.environ.pop("SERVICE_URL", None)
    main()
