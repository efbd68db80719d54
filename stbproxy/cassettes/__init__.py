"""vcrpy cassettes, both ways: the one module that reads and writes vcrpy's format
(vcr_format.py), a cassette replayed as a store (store.py), in-process replay for tests
with requests-mock (inprocess.py, the only importer of requests_mock), and a session's
export split by conversation (conversations.py).

vcr_format is pure (layer 2: errors, models, keys, redact, routing); store reads the
embedded store (layer 3); conversations reads sessions through the engine's layer (4);
inprocess runs an engine in the test's process (layer 5).
"""
