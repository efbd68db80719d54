"""Everything that is StableToolBench's: the catalog of ToolBench tool docs (catalog.py: the
catalog itself; api_doc.py: one API's doc and parameters (ToolBench's name
standardization is stbcore/toolbench_names.py, which the evaluator shares); routes.py: routing a request's URL to its API; tool_docs.py: reading
ToolBench's tool folders and query files), its rules for which answers are real
(validity.py), the bodies its clients expect (bodies.py), its kind of traffic
(traffic.py), and its /virtual endpoint (virtual_api.py).

The rules and formats are pure and sit low (layer 2: errors, models, jsonsafe, keys).
The import of its response cache is stb_cache/ (layer 3), the stability experiment over
its queries stability/ (layer 5).
"""
