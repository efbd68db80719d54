"""Everything that is StableToolBench's: the catalog of ToolBench tool docs (catalog.py: the
catalog itself; api_doc.py: one API's doc and parameters (ToolBench's name
standardization is stbcore/toolbench_names.py, which the evaluator shares); routes.py:
routing a request's URL to its API; tool_docs.py: reading ToolBench's tool folders and
query files), its rules for which answers are real
(validity.py), the bodies its clients expect (bodies.py), its /virtual calls on the wire
(virtual_calls.py: the request body read, the answer object written, where a proxy's own
/virtual sends misses), and its kind of traffic (traffic.py), which takes every request the
catalog routes and, in a running proxy, every /virtual call: keyed there, answered by the
engine like any call, and written back as StableToolBench's server writes its answers.

All of it is pure and sits low (layer 2: errors, models, jsonsafe, keys, traffic/).
The import of its response cache is stb_cache/ (layer 3), the stability experiment over
its queries stability/ (layer 5).
"""
