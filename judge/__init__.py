"""The Docker code judge: runs untrusted programs in single-use containers (SPEC section 9).

`judge.service.Judge` is the entry point; see each module's docstring for its one job.
This package imports nothing at import time so `judge/recipes.py` stays runnable by the
image build script with the system Python.
"""
