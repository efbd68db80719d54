"""Everything that is StableToolBench's: the catalog of ToolBench tool docs (catalog.py: the
catalog itself; api_doc.py: one API's doc and parameters (ToolBench's name
standardization is stbcore/toolbench_names.py, which the evaluator shares); routes.py: routing a request's URL to its API; tool_docs.py: reading
ToolBench's tool folders and query files), its rules for which answers are real
(validity.py), the bodies its clients expect (bodies.py), the import of its response
cache (cache_import.py) and where a cache's folders go (cache_placement.py), its /virtual
endpoint (virtual_api.py), and the stability experiment over its queries (stability.py,
stability_queries.py).

The rules and formats are pure and sit low (layer 2: errors, models, jsonsafe, keys);
the cache import reads and writes the store (layer 3); /virtual answers through the
engine (layer 4); the stability experiment starts proxies (layer 5).
"""
