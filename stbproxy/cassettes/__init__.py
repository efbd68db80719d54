"""vcrpy cassettes, both ways: written in vcrpy's format (vcr_format.py) and read back
(reading.py), the only importers of vcr; a cassette replayed as a store (store.py);
in-process replay for tests with requests-mock (inprocess.py, the only importer of
requests_mock); a session's export split by conversation (conversations.py), and what
``--all GLOB`` exports (selection.py); cassettes and flow files imported into a store
(importing.py).

The package sits at the engine's layer (4): inprocess runs an engine in the test's
process, store and conversations read the store and its sessions, and vcr_format and
reading need only the pure modules (errors, models, keys, redact, StableToolBench's
requests and traffic kind). The runtime, the commands and the pytest plugin use it.
"""
