"""``python -m redis_session``: the ``redis-session`` command line."""

from ._entry import main

if __name__ == "__main__":
    main()
