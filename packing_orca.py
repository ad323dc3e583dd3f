"""Batches of token ids: padded rows, and prefix-tree rows that hold the answers to a question together.

The answers to one question share their first tokens (question, reference, rationale). In a causal decoder a
token's hidden states depend on its prefix only, so inputs can be laid out as a trie in one batch row, each
distinct prefix once: a token attends to itself and its ancestors (a tree-shaped causal mask), its position is its
depth, and each input is pooled at its last token's node. Scoring (`predict`) and training (`pack_prefix_tree` +
`forward`) use this one layout. Exact up to float rounding, for gradients too: a shared token's gradient is the sum
of what each answer sends it. With dropout on, a shared token gets one dropout mask for all the answers that share
it instead of one each: the same distribution, not the same numbers.

What the model and training use: `padded_batches` and `prefix_tree_batches` (scoring: batches of up to a token
budget, longest first; `share_row_tokens`: how long a row may be), `pack_prefix_tree` (training batches) and
`tree_attention_mask` (the backbone's 4D mask for prefix-tree rows, in `forward`). Nothing here changes process-wide
settings.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def pad_token_ids(token_ids: list[list[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), right-padded to the longest list: the one batching of training and scoring."""
    width = max(len(ids) for ids in token_ids)
    input_ids = torch.full((len(token_ids), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(token_ids), width), dtype=torch.long)
    for i, ids in enumerate(token_ids):
        input_ids[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention_mask[i, : len(ids)] = 1
    return input_ids, attention_mask  # (B, T) each


def token_batches(order: list[int], lengths: list[int], budget: int) -> list[list[int]]:
    """Consecutive runs of `order` (longest first) whose padded size, count x first length, fits `budget`
    (at least one each)."""
    batches, batch = [], []
    for j in order:
        if batch and (len(batch) + 1) * lengths[batch[0]] > budget:
            batches.append(batch)
            batch = []
        batch.append(j)
    if batch:
        batches.append(batch)
    return batches


def padded_batches(token_ids: list[list[int]], pad_token_id: int, budget: int):
    """`(input indices, {input_ids, attention_mask})` batches of one input per right-padded row, longest inputs
    first, each up to `budget` tokens (padding included)."""
    order = sorted(range(len(token_ids)), key=lambda j: -len(token_ids[j]))
    for idx in token_batches(order, [len(t) for t in token_ids], budget):
        input_ids, attention_mask = pad_token_ids([token_ids[j] for j in idx], pad_token_id)  # (b, T) each
        yield idx, {"input_ids": input_ids, "attention_mask": attention_mask}


class PrefixTree:
    """Token sequences as a trie laid out in one row: `tokens[i]` has parent `parent[i]` (-1 for a root) and
    position `depth[i]`; parents come before children; `ends` holds (input index, node of its last token)."""

    def __init__(self):
        self.tokens: list[int] = []
        self.parent: list[int] = []
        self.depth: list[int] = []
        self.ends: list[tuple[int, int]] = []
        self._child: dict[tuple[int, int], int] = {}

    def new_nodes(self, ids) -> int:
        """How many nodes `add(_, ids)` would create: the tokens of `ids` after its longest prefix in the trie."""
        node = -1
        for k, token in enumerate(ids):
            node = self._child.get((node, token))
            if node is None:
                return len(ids) - k
        return 0

    def add(self, index: int, ids) -> None:
        """Add input `index` (token ids `ids`), sharing the nodes of its longest prefix already in the trie."""
        node = -1
        for k, token in enumerate(ids):
            child = self._child.get((node, token))
            if child is None:
                child = len(self.tokens)
                self._child[(node, token)] = child
                self.tokens.append(token)
                self.parent.append(node)
                self.depth.append(k)
            node = child
        self.ends.append((index, node))

    def ancestors(self) -> np.ndarray:
        """(n, n) bool: node i may attend to node j (j is i or one of its ancestors)."""
        n = len(self.tokens)
        out = np.zeros((n, n), dtype=bool)
        for i, p in enumerate(self.parent):
            if p >= 0:
                out[i] = out[p]
            out[i, i] = True
        return out


def prefix_tree_rows(token_ids: list[list[int]], groups=None, max_row_tokens: int | None = None) -> list[PrefixTree]:
    """The inputs as prefix trees in rows. Inputs with equal `groups` keys (all, without `groups`) share a
    trie, in sorted order so that similar inputs are neighbours; a trie is closed when the next input's new tokens
    would take it past `max_row_tokens`. With `max_row_tokens`, the tries of several groups are then merged into
    one up to that size (largest first, into the first row they fit): the tokens the groups have in common (an
    instruction before the question) are computed once per row, and batches of full rows hold little padding."""
    members: dict[Any, list[int]] = {}
    for i, ids in enumerate(token_ids):
        if not ids:
            raise ValueError(f"input {i} has no tokens")
        members.setdefault(None if groups is None else groups[i], []).append(i)
    tries = []
    for group in members.values():
        tree = PrefixTree()
        for i in sorted(group, key=lambda i: token_ids[i]):
            if max_row_tokens and tree.ends and len(tree.tokens) + tree.new_nodes(token_ids[i]) > max_row_tokens:
                tries.append(tree)
                tree = PrefixTree()
            tree.add(i, token_ids[i])
        tries.append(tree)
    if not max_row_tokens:
        return tries
    rows: list[PrefixTree] = []
    for tree in sorted(tries, key=lambda t: -len(t.tokens)):
        # a row already holding the start of the tree's first input gets at most len(tree) - that start new tokens
        first = token_ids[tree.ends[0][0]]
        room = max_row_tokens - len(tree.tokens) + len(first)  # for a row's tokens + the new ones along `first`
        row = next((r for r in rows if len(r.tokens) <= room and len(r.tokens) + r.new_nodes(first) <= room), None)
        if row is None:
            rows.append(tree)
        else:
            for i, _ in tree.ends:
                row.add(i, token_ids[i])
    return rows


def pack_rows(rows: list[PrefixTree], pad_token_id: int) -> tuple[dict[str, torch.Tensor], list[int]]:
    """Batch tensors of prefix-tree rows (see `pack_prefix_tree`) and the input index of each `pool_index` row."""
    width = max(len(r.tokens) for r in rows)
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    position_ids = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.eye(width, dtype=torch.bool).repeat(len(rows), 1, 1)  # (R, L, L); padding sees itself: no NaN
    pool, inputs = [], []
    for r, row in enumerate(rows):
        n = len(row.tokens)
        input_ids[r, :n] = torch.tensor(row.tokens, dtype=torch.long)
        position_ids[r, :n] = torch.tensor(row.depth, dtype=torch.long)
        mask[r, :n, :n] = torch.from_numpy(row.ancestors())
        for i, node in row.ends:
            pool.append((r, node))
            inputs.append(i)
    packed = dict(input_ids=input_ids, attention_mask=mask[:, None], position_ids=position_ids,
                  pool_index=torch.tensor(pool, dtype=torch.long))  # fmt: skip
    return packed, inputs


def pack_prefix_tree(token_ids: list[list[int]], pad_token_id: int, *, groups=None, max_row_tokens: int | None = None) -> dict[str, torch.Tensor]:
    """Inputs (token id lists) as prefix-tree rows, for `forward` (training) as `predict` lays them out:
    `input_ids` (R, L), `attention_mask` (R, 1, L, L) bool (True: may attend), `position_ids` (R, L) (the depth
    in the trie) and `pool_index` (N, 2) long: (row, position) of each input's last token, in input order.
    `groups`: one hashable key per input (e.g. its question); inputs share a trie only with inputs of the same key
    (all inputs, without it). `max_row_tokens`: no row longer than this; small groups' tries are merged up to it."""
    rows = prefix_tree_rows(token_ids, groups, max_row_tokens)
    packed, inputs = pack_rows(rows, pad_token_id)
    pool_index = torch.empty_like(packed["pool_index"])
    pool_index[torch.tensor(inputs, dtype=torch.long)] = packed["pool_index"]
    return dict(packed, pool_index=pool_index)


def prefix_tree_batches(token_ids: list[list[int]], pad_token_id: int, budget: int, *, groups=None, max_row_tokens=None):
    """`(input indices, pack_prefix_tree-style tensors)` batches of prefix-tree rows (`prefix_tree_rows`),
    longest rows first, each up to `budget` tokens; the indices say which input each `pool_index` row is."""
    rows = prefix_tree_rows(token_ids, groups, max_row_tokens)
    lengths = [len(r.tokens) for r in rows]
    for batch in token_batches(sorted(range(len(rows)), key=lambda r: -lengths[r]), lengths, budget):
        packed, inputs = pack_rows([rows[r] for r in batch], pad_token_id)
        yield inputs, packed


def share_row_tokens(backbone) -> int:
    """Most tokens of one prefix-tree row in `predict` (the tries of one or more questions, never more than the
    batch). Every token of a row is scored against all of the row's keys, masked or not: longer rows merge more
    questions (fewer tokens to compute), shorter ones spend less on attention. A row stops where attention over it
    would cost a tenth of a token's linear layers (4 x width x layers x row <= 2 x linear weights / 10), a power of
    two from 128 to 512: SmolLM2 and Gemma 3 270M get 256 (SmolLM2 5-8 % faster than at 512), the Qwen2.5-1.5B judge
    512 (at 256 it would compute 14 % more tokens; docs/performance.md, CPU round 11)."""
    config = backbone.config.get_text_config()
    heads, layers = getattr(config, "num_attention_heads", None), getattr(config, "num_hidden_layers", None)
    if not heads or not layers:  # no attention to weigh against the linear layers
        return 512
    width = heads * (getattr(config, "head_dim", None) or config.hidden_size // heads)
    linear = sum(m.weight.numel() for m in backbone.modules() if isinstance(m, torch.nn.Linear))
    rows = 128
    while rows < 512 and 4 * width * layers * (2 * rows) <= 2 * linear / 10:  # the next size still fits
        rows *= 2
    return rows


def tree_attention_mask(mask: torch.Tensor, position_ids: torch.Tensor, backbone_config, dtype: torch.dtype):
    """The backbone's attention mask for prefix-tree rows: `mask` (R, 1, L, L) bool, as a 4D mask (boolean for
    sdpa, additive for eager), which transformers passes to every layer as it is. A sliding window (Gemma 2/3,
    Mistral, Qwen2) is applied here, on positions: per layer type where the backbone has layer types.
    `backbone_config`: the backbone's config (window, layer types, attention implementation); `dtype`: the
    backbone's, for the additive mask of eager attention."""
    config = backbone_config.get_text_config()
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None) or []
    masks = {"full_attention": mask}
    if window:
        near = position_ids[:, None, :, None] - position_ids[:, None, None, :] < window  # (R, 1, L, L)
        masks["sliding_attention"] = mask & near
    if backbone_config._attn_implementation == "eager":  # eager attention adds its mask to the scores
        masks = {k: torch.zeros(m.shape, dtype=dtype, device=m.device).masked_fill(~m, torch.finfo(dtype).min) for k, m in masks.items()}
    if window and "sliding_attention" in layer_types:
        return masks  # one mask per layer type (Gemma 2/3, Qwen2)
    return masks["sliding_attention" if window and not layer_types else "full_attention"]  # all slide (Mistral) or none


__all__ = [
    "PrefixTree",
    "pack_prefix_tree",
    "pack_rows",
    "pad_token_ids",
    "padded_batches",
    "prefix_tree_batches",
    "prefix_tree_rows",
    "share_row_tokens",
    "token_batches",
    "tree_attention_mask",
]
