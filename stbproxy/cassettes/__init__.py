"""vcrpy cassettes, both ways: written in vcrpy's format (vcr_format.py) and read back
(reading.py), the only importers of vcr; a cassette replayed as a store (store.py);
in-process replay for tests with requests-mock (inprocess.py, the only importer of
requests_mock); and a session's export split by conversation (conversations.py).

vcr_format and reading are pure (layer 2: errors, models, keys, redact, and
StableToolBench's requests and traffic kind); store reads the embedded store (layer 3);
conversations reads sessions (layer 4); inprocess runs an engine in the test's process
(layer 5).
"""
