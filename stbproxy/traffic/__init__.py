"""The seam between the engine and the kinds of traffic it answers.

A kind of traffic (seam.TrafficKind) recognises its requests and turns each into a Call
(its key, its arguments parsed once, the request to send to the real API), judges whether
a real answer is valid, and says how a replay miss reads to its clients. The engine sees
calls and kinds only through this seam (seam.Kinds, the kinds of one proxy, tried in
order). The kinds here are the ones any proxy has: OpenAI-compatible LLM APIs, which
agents call for their own turns (llm_api.py), and plain HTTP, which takes every request
the others leave (plain_http.py). StableToolBench's kind lives with the rest of
StableToolBench (stb/traffic.py), which also puts the kinds of a proxy together.

Layer 2: it may import keys, models and StableToolBench's validity rules (stb/validity.py).
"""
