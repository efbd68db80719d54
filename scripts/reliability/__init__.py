"""Reliability: reliability.py (load, kill -9, fuzz, full disk) and fuzzkit.py, the seeded
generator of hostile requests it shares with the fuzz tests."""
