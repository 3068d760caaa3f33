"""`GET /openapi.json` and `/docs`: the document built from the app's routes and what their
views declare (`api/declare.py`), the wire models shared by handlers, and the `/v1` answer
models."""
