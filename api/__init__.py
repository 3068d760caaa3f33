"""HTTP surfaces, one blueprint each; `app.py` wires them together."""
