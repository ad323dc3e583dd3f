"""Global batches (one per optimiser step), each process's share of one, and a micro-batch's model inputs."""

from __future__ import annotations

import collections
import random
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def epoch_batches(lengths: list[int], batch_size: int, seed: int, epoch: int, groups: list | None = None,
                  piece: int | None = None, max_group_size: int | None = None) -> list[list[int]]:
    """Global batches (one per optimiser step) of similar lengths in a seeded random order: shuffle, sort within
    windows of 50 batches, shuffle the batches. Full batches only, so every step sees `batch_size` items, and the
    same items whatever the split into processes and micro-batches.

    With `groups` (one key per item, e.g. its question id; batching by question), a group's items stay together:
    groups are shuffled, sorted by mean length within windows of 50 batches and packed into pieces of `piece` items
    (the micro-batch size; default `batch_size`), whole groups first (the best fit among the next 16 groups), a
    group split over consecutive pieces only when none fits the room left; `batch_size // piece` consecutive pieces
    make a batch and the batches are shuffled. `max_group_size` cuts a larger group into random parts of at most
    that many items each epoch, so that a batch holds more questions (a more varied sample). A global batch cut
    into processes at multiples of `piece` keeps every whole-packed group on one process and in one micro-batch,
    and the batches do not depend on the number of processes."""
    rng = random.Random(seed * 100_003 + epoch)
    if groups is not None:
        return _group_batches(lengths, groups, batch_size, piece or batch_size, rng, max_group_size)
    order = list(range(len(lengths)))
    rng.shuffle(order)
    window = batch_size * 50
    batches = []
    for start in range(0, len(order), window):
        chunk = sorted(order[start : start + window], key=lambda i: lengths[i])
        batches += [chunk[i : i + batch_size] for i in range(0, len(chunk) - batch_size + 1, batch_size)]
    rng.shuffle(batches)
    return batches


def _group_batches(lengths: list[int], groups: list, batch_size: int, piece: int, rng: random.Random,
                   max_group_size: int | None) -> list[list[int]]:
    if batch_size % piece:
        raise ValueError(f"batch size {batch_size} is not a multiple of the piece size {piece}")
    members: dict = {}
    for i, key in enumerate(groups):
        members.setdefault(key, []).append(i)
    units = list(members.values())  # in order of first appearance: deterministic
    rng.shuffle(units)
    for unit in units:
        rng.shuffle(unit)
    if max_group_size:
        units = [unit[i : i + max_group_size] for unit in units for i in range(0, len(unit), max_group_size)]
        rng.shuffle(units)
    ordered, window, start = [], batch_size * 50, 0
    while start < len(units):  # windows of about 50 batches' items, sorted by mean length (less padding)
        end, size = start, 0
        while end < len(units) and size < window:
            size += len(units[end])
            end += 1
        ordered += sorted(units[start:end], key=lambda u: sum(lengths[i] for i in u) / len(u))
        start = end
    pieces, current, queue = [], [], collections.deque(ordered)
    while queue:
        room = piece - len(current)
        fits = [k for k in range(min(16, len(queue))) if len(queue[k]) <= room]
        if fits:
            k = max(fits, key=lambda k: len(queue[k]))  # the largest that fits, the first of equals
            current += queue[k]
            del queue[k]
        else:  # no group nearby fits whole: the next one fills the piece, its rest starts the next piece
            unit = queue.popleft()
            current += unit[:room]
            queue.appendleft(unit[room:])
        if len(current) == piece:
            pieces.append(current)
            current = []
    per_batch = batch_size // piece
    batches = [sum(pieces[i : i + per_batch], []) for i in range(0, len(pieces) - per_batch + 1, per_batch)]
    rng.shuffle(batches)
    return batches


def micro_batch_inputs(indices: list[int], token_ids: list[list[int]], records: list[dict], pad_id: int, *,
                       share_prefix: bool = False, groups: list | None = None) -> dict[str, torch.Tensor]:
    """A micro-batch's model inputs and ratings: one padded row per item, or with `share_prefix` prefix-tree rows
    (`pack_prefix_tree`: the items of one group, e.g. a question's answers, share a row and their common tokens)."""
    from modeling_orca import pad_ratings
    from packing_orca import pack_prefix_tree, pad_token_ids

    ratings = pad_ratings([records[i]["ratings"] for i in indices])
    if share_prefix:
        packed = pack_prefix_tree([token_ids[i] for i in indices], pad_id, groups=None if groups is None else [groups[i] for i in indices])
        return {**packed, "ratings": ratings}
    input_ids, attention_mask = pad_token_ids([token_ids[i] for i in indices], pad_id)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "ratings": ratings}


def process_share(batch: list[int], rank: int, world: int) -> list[int]:
    """This process's part of a global batch: equal consecutive slices (epoch_batches cuts batches so that slices
    at multiples of the micro-batch size keep a question's items together)."""
    size = len(batch) // world
    return batch[rank * size : (rank + 1) * size]
