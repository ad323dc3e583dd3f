"""States of a frozen backbone on disk: what the trained part reads, computed once per input.

With the backbone frozen, the head's input for a record (the final hidden state it is pooled at) never changes, so
a big backbone's forward pass is paid once per input, and the head trains on the cached states in seconds
(training/frozen.py). States are computed by the model's own scoring path (`encode`: prefix sharing, its dtype)
and read back only where nothing that makes them can differ. With `layer=j` a cache holds instead every token's
hidden state after the backbone's first j layers, what LoRA on the layers above reads (training/top_layers.py):

- the folder is named by a fingerprint of the backbone's weights (their bytes), its dtype and attention
  implementation, the pooling, the layer and the torch version: another backbone, revision, fine-tuned copy, dtype
  or layer gets another folder;
- within it, a record's key is the SHA-256 of its token ids (every input variant), which covers the template, the
  record's text, the tokenizer and `max_length`.

Shards are safetensors files written atomically, one per chunk of records, so a kill -9 loses at most the chunk in
flight and a rerun computes only what is missing.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import torch
from tqdm.auto import tqdm

from orca_io.files import write_bytes_atomic, write_json_atomic

logger = logging.getLogger("orca.train")

FORMAT = 1  # bump when the layout or what a state means changes


def backbone_fingerprint(model, layer: int | None = None) -> str:
    """SHA-256 of what the states depend on: every backbone tensor's name, dtype, shape and bytes, the attention
    implementation, the pooling, the layer and the torch version."""
    digest = hashlib.sha256()
    meta = {"format": FORMAT, "torch": torch.__version__, "pooling": model.config.pooling,
            "attn": model.backbone.config._attn_implementation, "class": type(model.backbone).__name__}
    if layer is not None:  # absent for pooled states: their folders stay where they were
        meta["layer"] = layer
    digest.update(json.dumps(meta, sort_keys=True).encode())
    for name, tensor in sorted(model.backbone.state_dict().items()):
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def record_keys(model, tokenizer, records: list[dict]) -> list[bytes]:
    """Per record, the SHA-256 of the token ids of its input variants (as `encode` forms them)."""
    from processing_orca import distinct_inputs, record_variants

    variants, owner = record_variants(records, model.config)
    inputs, which = distinct_inputs(variants, tokenizer, model.config)
    per_record: list[list] = [[] for _ in records]
    for i, u in zip(owner, which):
        shared, item = inputs[u]
        per_record[i].append([list(shared) if shared is not None else None, list(item)])
    return [hashlib.sha256(json.dumps(ids).encode()).digest() for ids in per_record]


class StateCache:
    """The cached states of one frozen backbone: `states(model, tokenizer, records)` returns each record's states
    in `encode`'s order, computing and storing the missing ones first: pooled, a (variants, H) tensor; with
    `layer=j`, a list of one (tokens, H) tensor per variant, each token's state after the first j layers.
    Make it before LoRA is added to the layers above (the fingerprint names the backbone as it was)."""

    def __init__(self, root: Path, model, chunk_records: int = 64, layer: int | None = None):
        self.layer = layer
        self.fingerprint = backbone_fingerprint(model, layer)
        self.folder = Path(root) / self.fingerprint[:24]
        self.folder.mkdir(parents=True, exist_ok=True)
        identity = self.folder / "identity.json"
        if not identity.exists():
            write_json_atomic(identity, {"fingerprint": self.fingerprint, "backbone": model.backbone.config.to_dict(),
                                         "dtype": str(model.backbone.dtype), "torch": torch.__version__, "layer": layer})
        self.chunk_records = chunk_records
        self.index: dict[bytes, torch.Tensor | list[torch.Tensor]] = {}  # pooled: (V, H); a layer's: V x (tokens, H)
        for shard in sorted(self.folder.glob("shard-*.safetensors")):
            self._load(shard)

    def _load(self, shard: Path) -> None:
        from safetensors.torch import load_file

        try:
            tensors = load_file(shard)
            keys, counts, states = tensors["keys"], tensors["counts"], tensors["states"]
            lengths = tensors["lengths"].tolist() if self.layer is not None else None  # tokens of each variant
        except Exception as err:  # noqa: BLE001 - an unreadable shard is recomputed, never trusted
            logger.warning("%s: unreadable (%s); its states are computed again", shard, err)
            return
        start = variant = 0
        for key, count in zip(keys, counts.tolist()):
            if lengths is None:
                self.index[bytes(key.tolist())] = states[start : start + count]
                start += count
            else:
                sizes = lengths[variant : variant + count]
                self.index[bytes(key.tolist())] = list(states[start : start + sum(sizes)].split(sizes))
                start, variant = start + sum(sizes), variant + count

    def _store(self, keys: list[bytes], states: list) -> None:
        from safetensors.torch import save

        data = {"keys": torch.tensor([list(k) for k in keys], dtype=torch.uint8),
                "counts": torch.tensor([len(s) for s in states], dtype=torch.long)}
        if self.layer is None:
            data["states"] = torch.cat(states).contiguous()
        else:
            data["lengths"] = torch.tensor([len(v) for s in states for v in s], dtype=torch.long)
            data["states"] = torch.cat([v for s in states for v in s]).contiguous()
        name = hashlib.sha256(b"".join(keys)).hexdigest()[:24]
        write_bytes_atomic(self.folder / f"shard-{name}.safetensors", save(data))
        self.index.update(zip(keys, states))

    def states(self, model, tokenizer, records: list[dict], *, max_batch_tokens: int | None = None, desc: str = "states") -> list:
        keys = record_keys(model, tokenizer, records)
        missing = list(dict.fromkeys(i for i, k in enumerate(keys) if k not in self.index))
        if missing:
            # answers to one question next to each other: they share a prefix-tree row within a chunk
            missing.sort(key=lambda i: str(records[i].get("question_id") or records[i].get("question", "")))
            bar = tqdm(total=len(missing), desc=desc, unit="record")
            for start in range(0, len(missing), self.chunk_records):
                chunk = [i for i in missing[start : start + self.chunk_records] if keys[i] not in self.index]
                if chunk:
                    grouped = self._compute(model, tokenizer, [records[i] for i in chunk], max_batch_tokens)
                    chunk_keys = [keys[i] for i in chunk]
                    unique = dict(zip(chunk_keys, grouped))  # a record repeated in a chunk is stored once
                    self._store(list(unique), list(unique.values()))
                bar.update(min(self.chunk_records, len(missing) - start))
            bar.close()
        return [self.index[k] for k in keys]

    def _compute(self, model, tokenizer, records: list[dict], max_batch_tokens: int | None) -> list:
        """Each record's states, computed: pooled by `model.encode`, a layer's by training.top_layers.layer_states."""
        if self.layer is None:
            flat, owner = model.encode(records, tokenizer, max_batch_tokens=max_batch_tokens)
        else:
            from training.top_layers import layer_states

            flat, owner = layer_states(model, tokenizer, records, self.layer, max_batch_tokens)
        grouped = [[j for j, o in enumerate(owner) if o == k] for k in range(len(records))]
        if self.layer is None:
            return [flat[js].clone() for js in grouped]
        return [[flat[j] for j in js] for js in grouped]

    def encode(self, model, tokenizer, records: list[dict], max_batch_tokens: int | None = None) -> tuple:
        """Every variant's states and its record's index, read from the cache: pooled, (V, H) as `model.encode`
        returns them; with a layer, a list of V (tokens, H) tensors."""
        per_record = self.states(model, tokenizer, records, max_batch_tokens=max_batch_tokens)
        owner = [i for i, s in enumerate(per_record) for _ in range(len(s))]
        flat = [v for s in per_record for v in s] if self.layer is not None else torch.cat(per_record)
        return flat, owner


class CachedStatesJudge:
    """A frozen-backbone model whose `predict` reads the states from a `StateCache` (computing the missing ones),
    runs the layers above a layer cache's (training.top_layers.pooled_from_layer) and applies the model's own
    `predict_from_states`: the same results as `model.predict` up to float rounding between batch layouts, for the
    run's evaluations. Everything else is the model's."""

    def __init__(self, model, cache: StateCache):
        self._model, self._cache = model, cache

    def predict(self, records, tokenizer, *, max_batch_tokens: int | None = None, show_progress: bool = False,
                clamp_threshold: float | None = None, **_) -> list[dict]:  # share_prefix etc.: the states are what they are
        records = list(records)
        states, owner = self._cache.encode(self._model, tokenizer, records, max_batch_tokens)
        if self._cache.layer is not None:
            from training.top_layers import pooled_from_layer

            with torch.inference_mode():
                states = pooled_from_layer(self._model, states, self._cache.layer, max_batch_tokens)
        return self._model.predict_from_states(records, states, owner, clamp_threshold)

    def __getattr__(self, name):
        return getattr(self._model, name)
