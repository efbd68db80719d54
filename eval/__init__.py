"""stbeval: offline StableToolBench evaluation (SoPR, SoWR) from answer files and cassettes."""
