"""scripts/reliability/fuzz_secrets.py still runs, finds nothing on this code, and would find a
secret if one were kept (its checker is tried on planted forms)."""

from __future__ import annotations

import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.reliability.fuzz_secrets import Tally, secrets_of
from scripts.reliability.secret_echo import ECHO_FORMS, WRITERS, places, received_values

REPO = Path(__file__).resolve().parents[2]


def test_the_checker_finds_every_form_of_every_secret_planted_in_a_text():
    sent = places(random.Random(5))
    secrets = secrets_of(sent)
    assert {s.place for s in secrets} == {p.name for p in sent} and len(sent) >= 19
    for secret in secrets:
        for form in WRITERS:
            tally = Tally()
            try:
                planted = WRITERS[form](secret.value)
            except UnicodeEncodeError:
                continue
            assert tally.search("entries", f"x {planted} y", secrets) >= 1, (secret.place, form)


def test_the_echo_upstream_reads_every_secret_back():
    """Each place's secrets are among the values the upstream echoes, so every form is tried."""
    for place in places(random.Random(6)):
        target = f"/echo/decoded/{place.name}{place.target}".partition("#")[0]  # a fragment never reaches it
        values = received_values(target, list(place.headers), place.body)
        for value, _ in place.secrets:
            if place.name != "fragment":
                assert value in values, (place.name, value, values)


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_fuzz_secrets_quick_finds_no_secret_and_no_poisoned_answer():
    done = subprocess.run([sys.executable, "-m", "scripts.reliability.fuzz_secrets", "--quick", "--seed", "3"],
                          cwd=REPO, capture_output=True, text=True, timeout=230)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    out = done.stdout
    assert re.search(r"seed 3, 19 places x 6 echo forms, 20 secrets; runs fast", out), out
    assert "secrets found in all: 0" in out
    assert re.search(r"keys holding a secret: 0 \(store keys 0, Redis keys 0;", out)
    assert re.search(r"cache poisoning: 0 of 4 answers .*; 2 of 2 paths", out), out
    assert "data kept: 0 answers changed" in out and out.rstrip().endswith("all checks passed")
    assert len(ECHO_FORMS) >= 20
