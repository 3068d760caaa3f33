"""Everything behind the provider face (`providers.py`): the message and result types, one module
per wire format, the exchange policy and transport, SSE/NDJSON framing, the circuit breaker, the
operator hints and the scripted provider. Imports `foundation/` and `config/`, nothing above."""
