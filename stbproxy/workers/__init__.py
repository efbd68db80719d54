"""Several processes answering on one port (``serve --workers N``), as the engine sees them
(the pool that starts and watches them is mitm/worker_pool.py, since each one runs the
mitmproxy front end): the link
over which a reader process hands the owner of the store what it cannot answer itself
(link.py), and the engine of a reader process, which answers hits from the store it opens
read-only and forwards the rest (reader_engine.py).

Both sit at the engine's layer (4: they may import the engine, the traffic seam, the store
and models).
"""
