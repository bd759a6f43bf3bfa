"""Agent-framework integrations, each an optional extra that ``import redis_session`` never loads.

- :mod:`redis_session.integrations.adk`: ``RedisSessionService``, a Google ADK
  ``BaseSessionService`` (``pip install 'redis-agent-sessions[adk]'``).
- :mod:`redis_session.integrations.openai_agents`: ``RedisAgentSession``, an OpenAI Agents SDK
  ``Session`` (``pip install 'redis-agent-sessions[openai-agents]'``).
- :mod:`redis_session.integrations.langgraph`: ``RedisSaver`` and ``AsyncRedisSaver``,
  LangGraph checkpointers (``pip install 'redis-agent-sessions[langgraph]'``).

The first two sit on :class:`redis_session.AsyncRedisStore` and use only its public API; the
LangGraph savers on either store, through its extension point
(:mod:`redis_session.extension`).
"""
