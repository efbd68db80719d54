"""Benchmarks: each script prints its figures beside a baseline measured in the same run.
hitload.py is their load generator, hitbench.py runs servers under it and hitstores.py
writes the stores and request plans they share."""
