"""stbproxy: a transparent, reproducible virtual API server for tool-using LLM agents."""

__version__ = "0.1.0"
