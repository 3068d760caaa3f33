"""The command line (`python app.py …`): serving, users, task imports, tokens. The top of the
house: it may import any wing, and nothing imports it but `app.py`'s `__main__`."""
