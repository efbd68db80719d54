"""APIs described by OpenAPI documents: a spec read into operations (spec.py, schemas.py,
model.py), a store's specs and the operation a request calls (catalog.py), the kind of
traffic that keys, checks and simulates their calls (traffic.py, describe.py), and the
drift report over what the store holds (drift.py). docs/openapi.md tells the user's side."""
