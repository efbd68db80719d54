"""Fakes of outside services (OpenAI-compatible endpoints) for tests and benchmarks."""
