"""Several processes answering on one port (``serve --workers N``): the pool that starts and
watches them (pool.py, above the mitmproxy front end, which each process runs), the link
over which a reader process hands the owner of the store what it cannot answer itself
(link.py), and the engine of a reader process, which answers hits from the store it opens
read-only and forwards the rest (reader_engine.py).

link and reader_engine sit at the engine's layer (4: they may import the engine, the traffic seam,
the store and models); pool may also import mitm (layer 5).
"""
