"""Answers made up without asking anyone, and what the engine asks of a simulator: the
request and the simulation that comes back (simulation.py), values drawn from a
StableToolBench ``template_response`` (templates.py) and from a JSON Schema
(from_schema.py). The same seed always gives the same bytes.

Pure (layer 2: errors, models, jsonsafe, json_schema, forensics' naming, StableToolBench's
bodies), so the kinds of traffic shape simulated answers with it; the simulators that ask
a model live in sim/ (layer 3).
"""
