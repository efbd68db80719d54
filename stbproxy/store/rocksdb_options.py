"""How the embedded store opens RocksDB: the block cache each process gives it
(STBPROXY_STORE_CACHE_MB) and the table options that keep a process's memory flat."""

from __future__ import annotations

import os

from rocksdict import BlockBasedIndexType, BlockBasedOptions, Cache, Options

from stbproxy.errors import StoreError

DEFAULT_CACHE_MB = 64
CACHE_MB_RANGE = (8, 1 << 20)  # up to 1 TiB: a larger number is a typo, not a cache
CACHE_MB_VARIABLE = "STBPROXY_STORE_CACHE_MB"


def cache_mb() -> int:
    """The block cache of each process that opens a store, in MiB (STBPROXY_STORE_CACHE_MB)."""
    raw = os.environ.get(CACHE_MB_VARIABLE, "").strip()
    if not raw:
        return DEFAULT_CACHE_MB
    low, high = CACHE_MB_RANGE
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise StoreError(f"{CACHE_MB_VARIABLE}={raw!r} is not a cache size: a whole number of MiB from {low} "
                         f"to {high}")
    return int(raw)


def rocksdb_options() -> Options:
    """What keeps a process's memory flat as the store grows: index and filter blocks, which
    RocksDB otherwise holds for every table file (about 10 bytes per entry), share one
    bounded LRU cache with the data blocks. The index and filters are partitioned, so a
    lookup reads a few small partitions, never a table's whole index; their top levels,
    small, stay pinned. Nothing else is pinned: RocksDB's pinning of level-0 tables held
    every table's index and filter partitions that an import wrote (4.5 % of the data,
    beyond the cache's size: 220 MB at 5 GB), as RSS that grew with the import. Tables keep
    the layout they were written with: stores written before this setting hold whole-table
    indexes, which pass through the same cache."""
    table = BlockBasedOptions()
    table.set_block_cache(Cache(cache_mb() << 20))
    table.set_cache_index_and_filter_blocks(True)
    table.set_index_type(BlockBasedIndexType.two_level_index_search())
    table.set_bloom_filter(10, False)  # a miss (a first call) rarely reads a data block
    table.set_partition_filters(True)
    table.set_pin_top_level_index_and_filter(True)
    options = Options(raw_mode=True)
    options.set_block_based_table_factory(table)
    return options
