"""A LangGraph agent run by two worker processes through one Redis: worker A runs it to a
human-in-the-loop ``interrupt()``, worker B (another process, another store) resumes it with
``Command(resume=...)``; then the thread's history, and a fork from a past checkpoint that
runs on while the original history stays.

The graph: a ``StateGraph`` over ``MessagesState``: ``agent`` (LangChain's fake chat model, no
network) asks for a tool, ``approve`` interrupts for a human's yes, ``tools`` (a ``ToolNode``)
runs it, ``agent`` answers.

    python examples/langgraph_workers.py --url redis://127.0.0.1:6379/0
    python examples/langgraph_workers.py --url redis+cluster://127.0.0.1:7000/0

Exit status 0 when every check held. ``--role start|resume`` runs one worker (what the demo
starts in a process of its own).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt

from redis_session.integrations.langgraph import RedisSaver

ROOT = Path(__file__).resolve().parents[1]


@tool
def get_weather(city: str) -> str:
    """The weather in ``city``."""
    return f"It is sunny in {city}."


def asks_for(city: str, call_id: str) -> AIMessage:
    """The model's reply that calls ``get_weather(city)``."""
    return AIMessage(
        content="", tool_calls=[{"name": "get_weather", "args": {"city": city}, "id": call_id}]
    )


def build(saver: RedisSaver, replies: list[BaseMessage]) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The agent graph on ``saver``; its fake model answers ``replies`` in turn."""
    model = FakeMessagesListChatModel(responses=replies)

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def approve(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1]
        assert isinstance(last, AIMessage)
        call = last.tool_calls[0]
        answer = interrupt({"tool": call["name"], "args": call["args"]})
        if answer != "yes":
            raise RuntimeError(f"the human said {answer!r}")
        return {}

    def route(state: MessagesState) -> str:
        return "approve" if getattr(state["messages"][-1], "tool_calls", None) else END

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("approve", approve)
    graph.add_node("tools", ToolNode([get_weather]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", route, ["approve", END])
    graph.add_edge("approve", "tools")
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=saver)


def config_of(thread: str) -> RunnableConfig:
    """The run config of thread ``thread``."""
    return {"configurable": {"thread_id": thread}}


def worker(role: str, url: str, prefix: str, thread: str) -> dict[str, Any]:
    """Worker A (``start``: to the interrupt) or B (``resume``: approve and finish)."""
    saver = RedisSaver.from_url(url, prefix=prefix, exclusive_steps=True)
    try:
        if role == "start":
            graph = build(saver, [asks_for("Paris", "call-1")])
            out = graph.invoke(
                {"messages": [HumanMessage("What is the weather in Paris?")]}, config_of(thread)
            )
            return {"interrupt": [i.value for i in out.get("__interrupt__", [])]}
        graph = build(saver, [AIMessage("Sunny in Paris, go out.")])
        out = graph.invoke(Command(resume="yes"), config_of(thread))
        return {"messages": [m.content for m in out["messages"]]}
    finally:
        saver.store.close()


def run_worker(role: str, url: str, prefix: str, thread: str, timeout: float = 60) -> Any:
    """Run :func:`worker` in a process of its own; its JSON result."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--role", role, "--url", url,
         "--prefix", prefix, "--thread", thread],
        capture_output=True, text=True, timeout=timeout, check=True, cwd=ROOT, env=env,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def demo(url: str, prefix: str) -> list[str]:
    """The two-process run, the history and the fork; the checks that failed (none: [])."""
    failed: list[str] = []
    thread = f"demo-{uuid.uuid4().hex[:8]}"
    started = run_worker("start", url, prefix, thread)
    print("worker A stopped at", started["interrupt"])
    if started["interrupt"] != [{"tool": "get_weather", "args": {"city": "Paris"}}]:
        failed.append("worker A did not stop at the interrupt")
    resumed = run_worker("resume", url, prefix, thread)
    print("worker B finished:", resumed["messages"][-1])
    if resumed["messages"][-2:] != ["It is sunny in Paris.", "Sunny in Paris, go out."]:
        failed.append("worker B did not resume the run")

    saver = RedisSaver.from_url(url, prefix=prefix, exclusive_steps=True)
    try:
        graph = build(saver, [asks_for("Rome", "call-2"), AIMessage("Rome: sunny too.")])
        history = list(graph.get_state_history(config_of(thread)))
        print(f"history: {len(history)} checkpoints")
        if (
            len(history) != 6
        ):  # input, its step, agent (interrupted at approve), approve, tools, agent
            failed.append(f"history holds {len(history)} checkpoints, not 6")
        first = history[-2]  # the checkpoint after the user's input, before the agent ran
        forked = graph.update_state(first.config, {"messages": [HumanMessage("And in Rome?")]})
        out = graph.invoke(None, forked)
        print("fork stopped at", [i.value for i in out.get("__interrupt__", [])])
        out = graph.invoke(Command(resume="yes"), config_of(thread))
        print("fork finished:", out["messages"][-1].content)
        if out["messages"][-1].content != "Rome: sunny too.":
            failed.append("the fork did not run on")
        after = list(graph.get_state_history(config_of(thread)))
        kept = {h.config["configurable"]["checkpoint_id"] for h in after}
        if not {h.config["configurable"]["checkpoint_id"] for h in history} <= kept:
            failed.append("the fork lost checkpoints of the original history")
        original = graph.get_state(history[0].config)
        if original.values["messages"][-1].content != "Sunny in Paris, go out.":
            failed.append("the original history's end changed")
        print(f"history after the fork: {len(after)} checkpoints, the original {len(history)} kept")
    finally:
        saver.delete_thread(thread)
        saver.store.close()
    return failed


def main(argv: list[str] | None = None) -> int:
    """Run the demo (or one worker with ``--role``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--prefix", default="lg-demo:")
    parser.add_argument("--role", choices=["start", "resume"])
    parser.add_argument("--thread")
    args = parser.parse_args(argv)
    if args.role:
        print(json.dumps(worker(args.role, args.url, args.prefix, args.thread)))
        return 0
    failed = demo(args.url, args.prefix)
    for problem in failed:
        print("FAILED:", problem)
    print("checks", "FAILED" if failed else "OK")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
