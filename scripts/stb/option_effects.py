"""What each option that departs from StableToolBench changes: the pipeline scenario of
tests/stb_server/scenario.py (twelve queries, four of them meeting a rule that options
change) played through the drop-in with the defaults and with each option, counted against
what StableToolBench's own server answered (tests/stb_server/recorded.json).

    python scripts/stb/option_effects.py

Prints, per setting, how many of the twelve conversations differ from StableToolBench's,
which queries, and the real API and simulator model calls made.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.common import stbproxy_command  # noqa: E402
from stbproxy.serve_process import ServeProcess  # noqa: E402
from tests.conftest import STB_DATA  # noqa: E402
from tests.fakes.fake_openai import FakeOpenAI  # noqa: E402
from tests.pipeline_run import PipelineLlm, Script, run_queries  # noqa: E402
from tests.stb_server import scenario  # noqa: E402

SETTINGS = {
    "defaults": ((), ()),
    "--stb-keys canonical": (("--stb-keys", "canonical"), ("--stb-keys", "canonical")),
    "--skip-failures": (("--skip-failures",), ()),
    "--validity strict": ((), ("--validity", "strict")),
}


def run(script: Script, import_args: tuple[str, ...], serve_args: tuple[str, ...]) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        store = Path(folder) / "store"
        cache = scenario.write_cache(Path(folder) / "cache", scenario.pipeline_cache(script))
        subprocess.run([*stbproxy_command(), "import", "stb-cache", str(cache), "--store", str(store), *import_args],
                       check=True, capture_output=True)
        with scenario.RealApi(lambda call: scenario.pipeline_real_answer(script, call)) as real, \
                FakeOpenAI(scenario.simulator_model) as model, FakeOpenAI(PipelineLlm(script)) as agent, \
                ServeProcess(store, "--toolbench-url", real.url, "--simulator", "llm", "--sim-model",
                             scenario.SIM_MODEL, *serve_args, env=model.env()) as proxy:
            histories = run_queries(script, sorted(script.items), llm_base_url=agent.base_url, tools="virtual",
                                    service_url=f"{proxy.url}/virtual")
            return {"histories": histories, "real_calls": len(real.calls), "model_calls": model.calls}


def main() -> None:
    script = Script.load(STB_DATA)
    recorded = scenario.Recorded.load().pipeline
    print(f"StableToolBench's server: {recorded['real_calls']} real calls, {recorded['model_calls']} model calls")
    for name, (import_args, serve_args) in SETTINGS.items():
        made = run(script, import_args, serve_args)
        differ = sorted((qid for qid, history in made["histories"].items()
                         if json.dumps(history) != json.dumps(recorded["histories"][qid])), key=int)
        print(f"{name:<22} {len(differ):>2} of {len(made['histories'])} conversations differ"
              f"{' (' + ', '.join(differ) + ')' if differ else ''}; "
              f"{made['real_calls']} real calls, {made['model_calls']} model calls")


if __name__ == "__main__":
    main()
