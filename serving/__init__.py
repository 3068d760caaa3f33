"""How the app is served: an asyncio HTTP server in front of the Flask (WSGI) app."""
