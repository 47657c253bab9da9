"""Small graphs for the Agent Server end-to-end test.

``graph``: one human-in-the-loop pause, one slow step. ``delay`` makes the first node wait, so a test can
start a second run while the first one is still busy (``multitask_strategy="rollback"``); an answer with a
``linger`` makes the last node wait, so a run that answered the pause can be rolled back the same way.

``memory_graph``: one node that reads a user's memories from the long-term store (``get_store()``, which
the server wires to ``langgraph.json``'s ``store``) and writes a new one.
"""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any, TypedDict

from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt


class State(TypedDict, total=False):
    topic: str
    delay: float
    steps: Annotated[list[str], operator.add]
    approved: Any


async def prepare(state: State) -> State:
    await asyncio.sleep(state.get("delay", 0.0))
    return {"steps": [f"prepare {state.get('topic', '')}"]}


def ask(state: State) -> State:
    answer = interrupt({"question": f"publish {state.get('topic', '')}?"})
    return {"approved": answer, "steps": ["ask"]}


async def finish(state: State) -> State:
    # An answer given as {"answer": ..., "linger": seconds} keeps the run busy here, after the interrupt was
    # answered: a test can then roll that run back (``multitask_strategy="rollback"``) while it works.
    approved = state.get("approved")
    if isinstance(approved, dict):
        await asyncio.sleep(approved.get("linger", 0.0))
    return {"steps": ["finish"]}


builder = StateGraph(State)
builder.add_sequence([("prepare", prepare), ("ask", ask), ("finish", finish)])
builder.add_edge(START, "prepare")
builder.add_edge("finish", END)
graph = builder.compile()


class MemoryState(TypedDict, total=False):
    user: str
    fact: str
    recalled: list[str]


async def remember(state: MemoryState) -> MemoryState:
    store = get_store()
    namespace = ("memories", state["user"])
    recalled = sorted(item.value["fact"] for item in await store.asearch(namespace, limit=100))
    if fact := state.get("fact"):
        await store.aput(namespace, f"fact-{len(recalled)}", {"fact": fact})
    return {"recalled": recalled}


memory_builder = StateGraph(MemoryState)
memory_builder.add_node("remember", remember)
memory_builder.add_edge(START, "remember")
memory_builder.add_edge("remember", END)
memory_graph = memory_builder.compile()
