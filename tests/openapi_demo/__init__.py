"""An OpenAPI-described API for tests: the specs the tests write (specs.py) and a loopback
server that implements one of them, or drifts from it (api.py)."""
