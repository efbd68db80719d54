"""Where answers are kept, one job a module:

- embedded.py: the embedded RocksDB store, ``Store``; it and rocksdb_options.py (how RocksDB
  is opened: the block cache, the table options) are the only importers of rocksdict;
- key_layout.py: the embedded store's keys (which prefix holds what, a session record's key);
- folder.py: the store's folder around RocksDB's files (default place, credential salt, size
  on disk, why a folder cannot hold a store); stats.py: what ``stbproxy stats`` counts;
- record_format.py: the bytes of one stored record, the same in both tiers;
- shared_url.py: the shared tier's URL (forms, parts, the password never shown);
- shared_client.py: the Redis side of the shared tier (key layout, clients, failures told
  and explained); it and the two below are the only importers of redis;
- shared_tier.py: the shared Redis/Valkey tier of a fleet on a proxy's event loop;
- shared_bulk.py: the same tier for commands (pipelined batches, the check at start);
- tiered.py: the two tiers as one store; sync.py: copying between them;
- write_failures.py: the record of writes a store refused;
- redis_process.py: a real redis-server process for tests and ``--shared`` recipes.

It may import errors, models, private_files and sessions (layers 1-2), nothing above:
the engine, the front ends and the commands use it, never the other way round.
"""
