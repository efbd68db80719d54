"""Benchmark: SoPR of 765 queries x 3 rounds against a fake judge taking 200 ms a call.

Runs ``python -m stbeval pass-rate`` twice on the same output folder, the way a user
would: first at the default concurrency (every judgment is a call), then again, when
every judgment comes from the run's log. Prints both wall times (targets: under 60 s
and under 5 s) and checks that the second run made no call and gave the same numbers.

Baseline (measured in the same run): the first run, where every judgment is a call; the
second must match its numbers. Both wall times are also held to fixed targets.

Usage: python scripts/bench/bench_eval.py [--queries 765] [--rounds 3] [--latency 0.2]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # for tests.fakes

from tests.fakes.fake_openai import FakeOpenAI, ToolCall  # noqa: E402

# The solvable query counts per group, as published.
GROUPS = {"G1_instruction": 163, "G1_category": 153, "G1_tool": 158, "G2_instruction": 106, "G2_category": 124,
          "G3_instruction": 61}


def answer(qid: int) -> dict:
    """A converted answer of typical shape: two tool calls, a thought, then Finish."""
    final = json.dumps({"return_type": "give_answer", "final_answer": f"Answer {qid}: " + "details " * 40})

    def tool(name: str, response: str, *after: dict) -> dict:
        return {"role": "tool", "message": {"name": name, "arguments": '{"q": "x"}', "response": response},
                "next": list(after)}

    finish = {"role": "tool", "message": {"name": "Finish", "arguments": final, "response": ""}, "next": []}
    thought = {"role": "assistant", "message": "I have what I need. " * 5, "next": [finish]}
    details = [{"role": "system", "message": "", "next": [{"role": "user", "message": "", "next": [
        tool("search_for_tool", '{"error": "", "response": "' + "result " * 60 + '"}',
             tool("details_for_tool", '{"error": "", "response": "' + "more " * 60 + '"}', thought))]}]}]
    return {"query": f"Benchmark query {qid}: please find the thing and report it.",
            "available_tools": [{"name": "search_for_tool", "description": "search", "parameters": {}},
                                {"name": "Finish", "description": "finish", "parameters": {}}],
            "answer": {"method": "bench", "total_steps": 6, "final_answer": final, "answer_details": details}}


def build(folder: Path, total: int) -> tuple[Path, Path]:
    answers, ids = folder / "answers" / "bench", folder / "ids"
    answers.mkdir(parents=True)
    ids.mkdir()
    scale = total / sum(GROUPS.values())
    qid = 0
    for group, count in GROUPS.items():
        n = max(1, round(count * scale))
        entries = {str(qid + i): answer(qid + i) for i in range(n)}
        qid += n
        (answers / f"{group}.json").write_text(json.dumps(entries))
        (ids / f"{group}.json").write_text(json.dumps({q: 0 for q in entries}))
    return answers, ids


def judge(request: dict) -> ToolCall:
    # Deterministic labels, about two thirds Solved.
    digest = hashlib.sha256(request["messages"][0]["content"].encode()).digest()
    status = "Unsolved" if digest[0] < 85 else "Solved"
    return ToolCall("check_answer_status", {"reason": "bench", "answer_status": status})


def run(command: list[str], env: dict[str, str]) -> tuple[float, dict]:
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"run failed ({done.returncode}):\n{done.stderr}")
    return elapsed, {"stdout": done.stdout, "stderr": done.stderr}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=765)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per fake judge call")
    parser.add_argument("--concurrency", type=int, default=None, help="default: stbeval's default")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="stbeval-bench-") as tmp, FakeOpenAI(judge, latency=args.latency) as fake:
        answers, ids = build(Path(tmp), args.queries)
        out = Path(tmp) / "run"
        command = [sys.executable, "-m", "stbeval", "pass-rate", "--answers", str(answers), "--ids", str(ids),
                   "--out", str(out), "--rounds", str(args.rounds), "--judge-model", "bench-judge", "--no-progress"]
        if args.concurrency:
            command += ["--concurrency", str(args.concurrency)]
        env = {**os.environ, **fake.env()}

        first_time, first = run(command, env)
        first_calls = fake.calls
        first_summary = json.loads((out / "summary.json").read_text())
        second_time, second = run(command, env)
        second_calls = fake.calls - first_calls
        second_summary = json.loads((out / "summary.json").read_text())

    same = [g["runs"] for g in first_summary["groups"]] == [g["runs"] for g in second_summary["groups"]]
    print(first["stdout"], end="")
    print(f"queries: {sum(g['queries'] for g in first_summary['groups'])} x {args.rounds} rounds, "
          f"fake judge latency {args.latency * 1000:.0f} ms")
    print(f"first run (default concurrency): {first_time:.1f} s, {first_calls} judge calls  [target < 60 s]")
    print(f"re-run from the log:             {second_time:.1f} s, {second_calls} judge calls  [target < 5 s]")
    print(f"identical numbers: {same}")
    if second_calls or not same:
        sys.exit("the re-run should make no call and give the same numbers")


if __name__ == "__main__":
    main()
