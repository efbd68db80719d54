"""Where answers are kept: the embedded RocksDB store (embedded.py, the only importer of
rocksdict), the shared Redis/Valkey tier of a fleet (shared.py, the only importer of redis),
the two tiers as one store (tiered.py), copying between them (sync.py), the record of
writes a store refused (write_failures.py), and a real redis-server process for tests and
``--shared`` recipes (redis_process.py).

It may import errors, models, private_files and sessions (layers 1-2), nothing above:
the engine, the front ends and the commands use it, never the other way round.
"""
