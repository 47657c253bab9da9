"""Which texts a batch of puts embeds, and where their vectors go (outside the plans: sync or async)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from langgraph.store.base import (
    Op,
    PutOp,
    get_text_at_path,
    tokenize_path,
)

from .layout import Place, Vectors


# ------------------------------------------------------------------------------------------------
# Embedding (outside the plans: sync or async)
# ------------------------------------------------------------------------------------------------
def texts_to_embed(index: dict[str, Any], ops: Iterable[PutOp]) -> dict[str, list[Place]]:
    """Unique text -> the (namespace, key, path) fields it comes from, as InMemoryStore extracts them."""
    out: dict[str, list[Place]] = {}
    for op in ops:
        if op.value is None or op.index is False:
            continue
        paths = index["__tokenized_fields"] if op.index is None else [(p, tokenize_path(p)) for p in op.index]
        for path, tokens in paths:
            texts = get_text_at_path(op.value, tokens)
            if len(texts) > 1:
                for i, text in enumerate(texts):
                    out.setdefault(text, []).append((tuple(op.namespace), op.key, f"{path}.{i}"))
            elif texts:
                out.setdefault(texts[0], []).append((tuple(op.namespace), op.key, path))
    return out


def assign_vectors(
    to_embed: dict[str, list[Place]], embeddings: Sequence[Sequence[float]]
) -> dict[tuple[tuple[str, ...], str], Vectors]:
    places = [place for places in to_embed.values() for place in places]
    texts = [text for text, places in to_embed.items() for _ in places]
    by_text = dict(zip(to_embed, embeddings, strict=True))
    out: dict[tuple[tuple[str, ...], str], Vectors] = {}
    for text, (namespace, key, path) in zip(texts, places, strict=True):
        out.setdefault((namespace, key), {})[path] = list(by_text[text])
    return out


def last_writes(ops: Sequence[Op]) -> list[PutOp]:
    last: dict[tuple[tuple[str, ...], str], PutOp] = {}
    for op in ops:
        if isinstance(op, PutOp):
            last[(tuple(op.namespace), op.key)] = op
    return list(last.values())
