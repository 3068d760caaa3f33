"""Settings: the typed `Settings` read from the environment and `.env` (`settings.py`), and the
README table and `.env.example` generated from their descriptions (`doc.py`)."""
