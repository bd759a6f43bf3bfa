"""The blocking side, generated from ``redis_session._async`` by ``tools/unasync.py``: never
edit these modules, edit their async source and run the tool. This module imports nothing.
"""
