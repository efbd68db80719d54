"""The stability experiment: StableToolBench's queries played against proxies started with
each setting, to count how often an answer changes between runs (experiment.py), over a
query file or the built-in synthetic set (queries.py).

It starts proxies as a user does (serve_process), so it sits with the faces (layer 5);
``stbproxy stability`` (cli/stability.py) runs it.
"""
