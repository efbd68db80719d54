"""StableToolBench's response cache brought into a store: its entries read and written as
records (importer.py, ``stbproxy import stb-cache``), which of its folders and files
requests can reach under the catalog (placement.py), and the records written into a store
(loading.py).

It reads and writes the store (layer 3: store, and StableToolBench's rules in stb/); the
import command (cli/importing.py) drives it.
"""
