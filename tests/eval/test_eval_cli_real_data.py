"""eval convert on data_example's raw DFS answers gives the original converter's file.

These tests check exact facts of StableToolBench's real files (ids, counts, the original
evaluator's outputs); the formats themselves are also checked on small generated files in
test_eval_cli.py. Without the real files this module is one skip (see tests/stb_samples.py).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from stbeval.cli import eval_group
from tests.stb_samples import real_stb_data, require_real_stb_data, skip_reason  # noqa: E402

if real_stb_data() is None:
    pytest.skip(skip_reason(), allow_module_level=True)


@pytest.fixture
def stb():
    return require_real_stb_data()


def test_convert_command_writes_the_converted_format(stb, tmp_path):
    example = stb / "data_example"
    target = tmp_path / "converted.json"
    result = CliRunner().invoke(eval_group, ["convert", "--answers", str(example / "answer" / "virtual_chatgpt_dfs"),
                                             "--out", str(target)])
    assert result.exit_code == 0, result.output
    original = example / "model_predictions_converted" / "virtual_chatgpt_dfs" / "G1_instruction.json"
    assert json.loads(target.read_text()) == json.loads(original.read_text())

