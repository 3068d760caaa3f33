"""`GET /openapi.json` and `/docs`: the document built from the app's routes, the wire models
shared by handlers, and the `/v1` answer models."""
