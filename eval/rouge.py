"""ROUGE-L F1 of two texts, computed by Google's ``rouge-score`` package.

The only module of stbeval that imports rouge_score. The package's own LCS scoring is
used as it is; only the tokenizer is ours, because the package's default drops every
character outside a-z and 0-9, so two identical answers in Chinese or Russian would
score 0. Ours lower-cases and splits on anything that is not a letter or digit, exactly
as the default does for ASCII text, keeps letters of every script, and makes each CJK
ideograph and kana its own token (those scripts do not separate words with spaces).
No stemming, as in the package's default.
"""

from __future__ import annotations

import functools
import re
from typing import Any

# Ideographs, kana and their extensions, one token each; other letters and digits form words.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TOKEN = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+")


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


@functools.cache
def _scorer() -> Any:
    # Imported on first use: rouge_score pulls in nltk, which takes most of a second.
    from rouge_score import rouge_scorer, tokenizers

    class _Tokenizer(tokenizers.Tokenizer):
        def tokenize(self, text: str) -> list[str]:
            return tokens(text)

    return rouge_scorer.RougeScorer(["rougeL"], tokenizer=_Tokenizer())


def rouge_l(reference: str, candidate: str) -> float:
    """ROUGE-L F1 of ``candidate`` against ``reference``, between 0 and 1."""
    return float(_scorer().score(reference, candidate)["rougeL"].fmeasure)
