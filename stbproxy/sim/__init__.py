"""Answers when the real API cannot give one: the simulators (simulators.py: build_simulator, the schema one and
"off"; llm_simulator.py: the LLM one, the only importer of openai; llm_prompt.py: its
prompt and the reading of its replies), which simulator to run (config.py), what a
simulator may see of a call and its stored examples (call_facts.py), and fault injection,
which makes calls fail on purpose (faults.py). What the engine asks of a simulator, and the
answers made without a model, are synthesis/ (pure, below).

It may import the pure modules below it (errors, models, bodies, jsonsafe, keys, catalog,
redact, synthesis, stb/api_requests); the engine and the runtime use it.
"""
