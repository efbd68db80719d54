"""Run forensics: repeated trials, forks of a recorded run, verification against the live
APIs, and ordered replay of a session (docs/forensics.md)."""
