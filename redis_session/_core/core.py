"""The sans-I/O core: every store operation as a generator of Redis requests.

An operation validates its arguments, yields :class:`ScriptCall` or :class:`Commands` requests,
receives each reply by ``send`` and returns its result (or raises). ``RedisStore`` and
``AsyncRedisStore`` only drive these generators, one with blocking calls and one with ``await``,
so the two cannot drift in behaviour.

:class:`Core` composes the collaborators, each of one concern, each given what it uses:

- :class:`~.trees.Trees`: key names, and what the store knows of each session tree;
- :class:`~.index.Index`: the session index (listing) and reads of the store's own keys;
- :class:`~.keyring.Keyring`: passphrase, master key, each session's data key;
- :class:`~.reads.Reader`: the read path, and the decoded messages held (read cache);
- :class:`~.writes.Writer`: the loop every tree write goes through;
- :class:`~.sessions.Sessions`, :class:`~.children.Children`, :class:`~.secrets.Secrets`,
  :class:`~.conversation.Conversation` (branch, rewind, repair): the operations;
  :class:`~.rekey.Rotation`: passphrase rotation; :class:`~.turns.Turns`: one worker at a time
  in a session (fenced turns).

Script arguments and replies are built and read by name (:mod:`redis_session.contracts`);
statuses become exceptions in one table (:mod:`redis_session.status`).
"""

from __future__ import annotations

from ..keys import KeySchema
from ..options import StoreOptions
from .children import Children
from .conversation import Conversation
from .eventlog import EventLog
from .index import Index
from .keyring import Keyring
from .limits import Limits
from .reads import Reader
from .rekey import RekeyProgress, RekeyReport, Rotation
from .requests import Commands, Compute, Emit, Op, Request, ScriptCall
from .secrets import Secrets
from .sessions import Sessions
from .trees import Trees
from .turns import Turns
from .writes import Writer

__all__ = [
    "Commands",
    "Compute",
    "Core",
    "Emit",
    "Op",
    "RekeyProgress",
    "RekeyReport",
    "Request",
    "ScriptCall",
]


class Core:
    """A store's state and operations, shared by the sync and async stores."""

    def __init__(self, options: StoreOptions, *, cluster: bool = False) -> None:
        self.options = options
        self.schema = schema = KeySchema(options.prefix, cluster=cluster)
        self.limits = limits = Limits()
        self.trees = trees = Trees(schema, options)
        self.index = index = Index(schema)
        self.events = events = EventLog(schema, options, index)
        self.keyring = keyring = Keyring(schema, options, index)
        self.reader = reader = Reader(schema, options, limits, trees, keyring)
        self.writer = writer = Writer(trees, keyring)
        shared = (schema, options, limits, trees, keyring, reader, writer, index, events)
        self.sessions = Sessions(*shared)
        self.children = Children(*shared)
        self.conversation = Conversation(self.sessions, self.children)
        self.secrets = Secrets(schema, limits)
        self.rotation = Rotation(keyring, index, schema, limits)
        self.turns = Turns(trees)
