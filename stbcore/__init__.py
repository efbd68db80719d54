"""Rules shared by the proxy (stbproxy) and the evaluator (stbeval).

The lowest layer: standard library only, and it imports neither stbproxy nor stbeval,
so both can build on it without one depending on the other.
"""
