"""Benchmark and reliability scripts, run as files from the repository root.

bench/: figures of the proxy against a baseline measured in the same run;
reliability/: load, crashes, hostile input and a full disk, each with a pass/fail check;
common.py: what both share.
"""
