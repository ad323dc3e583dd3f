"""LoRA on the top layers of a frozen backbone, trained from cached states of the layer below them.

A stage with `top_layers: k` (training/frozen.py) trains LoRA adapters on the backbone's last k decoder layers and
the head. The first L - k layers do not change, so each training input's hidden states after them (every token of
its sequence, not only the pooled one) are computed once, by prefix-tree rows as `predict` lays them out, and
cached (training/state_cache.py with `layer=L-k`); a training step runs only the top k layers, the final norm and
the head on them. Exact: the same losses and gradients as the whole model's `forward` with the same adapters
(tests/test_top_layers.py), since a token's state after layer L-k depends only on its own prefix.

The bottom and top parts are views of the backbone: instances of its own class (its forward: masks, rotary
embeddings, layer types) built on the meta device, holding the backbone's own modules, so nothing is copied and
the adapters trained in the top view are the backbone's. Causal decoders with a `layers` list and a final `norm`
(Llama, Qwen2, OLMo 2, Gemma 3) pooled at the last token.
"""

from __future__ import annotations

import copy
import re

import torch
from torch import nn


def num_layers(model) -> int:
    return model.backbone.config.num_hidden_layers


def backbone_view(backbone, first: int, last: int, final_norm: bool):
    """The backbone running only its decoder layers first..last-1 (`inputs_embeds`: the states before layer
    `first`), then its final norm or, without `final_norm`, nothing: `last_hidden_state` is layer last-1's output."""
    config = copy.deepcopy(backbone.config)
    config.num_hidden_layers = last - first
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[first:last]
    config.use_cache = False
    with torch.device("meta"):  # allocates nothing: every module is replaced by the backbone's own below
        view = type(backbone)(config)
    for name, child in backbone.named_children():
        setattr(view, name, child)
    view.layers = nn.ModuleList(backbone.layers[first:last])
    if not final_norm:
        view.norm = nn.Identity()
    return view


def check_supported(model, k: int) -> None:
    if not model.prefix_sharing_supported or not hasattr(model.backbone, "layers"):
        raise SystemExit("top_layers needs a causal decoder pooled at the last token (Llama, Qwen2, OLMo 2, Gemma 3)")
    if not 0 < k <= num_layers(model):
        raise SystemExit(f"top_layers is {k}; the backbone has {num_layers(model)} layers")


@torch.inference_mode()
def layer_states(model, tokenizer, records: list[dict], layer: int, max_batch_tokens: int | None = None, *,
                 pooled_by_layer: bool = False):
    """(states, owner): every input variant's hidden states after the backbone's first `layer` layers, one
    (tokens, H) tensor per variant in `model.encode`'s order, and each variant's record. Computed on prefix-tree
    rows (a question's answers share their prefix; packing_orca), each input's tokens read back along its path.
    With `pooled_by_layer`, instead its pooled (last) token's state after each of those layers, before the final
    norm: one (layer, H) tensor per variant (benchmarks/layer_scan.py: which layer a head should read)."""
    from packing_orca import prefix_tree_batches
    from processing_orca import distinct_inputs, record_variants

    variants, owner = record_variants(records, model.config)
    keys, which = distinct_inputs(variants, tokenizer, model.config)  # (shared ids or None, item ids)
    ids = [list(item) if shared is None else list(shared + item) for shared, item in keys]
    groups = [("shared", shared) if shared is not None else ("alone", u) for u, (shared, _) in enumerate(keys)]
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    budget = model._batch_token_budget(max_batch_tokens, None)
    bottom = backbone_view(model.backbone, 0, layer, final_norm=False)
    out: list[torch.Tensor | None] = [None] * len(keys)
    was_training = model.training
    model.eval()
    # each layer's output, read by hooks of our own: transformers' output_hidden_states records through hooks that
    # every view built on these layers adds again, so a second view would record each layer twice
    outputs: list[torch.Tensor] = []
    hooks = [block.register_forward_hook(lambda module, args, output: outputs.append(output[0] if isinstance(output, tuple) else output))
             for block in bottom.layers] if pooled_by_layer else []
    try:
        for inputs, batch in prefix_tree_batches(ids, pad_id, budget, groups=groups, max_row_tokens=min(model.share_row_tokens, budget)):
            batch = {k: v.to(model.device) for k, v in batch.items()}
            mask, positions = model._backbone_mask_and_positions(batch["attention_mask"], batch["position_ids"], batch["pool_index"])
            outputs.clear()
            hidden = bottom(input_ids=batch["input_ids"], attention_mask=mask, position_ids=positions).last_hidden_state  # (R, L, H)
            for (row, node), u in zip(batch["pool_index"].tolist(), inputs):
                if pooled_by_layer:
                    out[u] = torch.stack([h[row, node] for h in outputs]).cpu()  # (layer, H)
                    continue
                path = batch["attention_mask"][row, 0, node].nonzero()[:, 0]  # its ancestors and itself, parents first
                out[u] = hidden[row, path].cpu().clone()  # (tokens, H)
    finally:
        for hook in hooks:
            hook.remove()
        model.train(was_training)
    return [out[u] for u in which], owner


def pooled_from_layer(model, states: list[torch.Tensor], layer: int, max_batch_tokens: int | None = None) -> torch.Tensor:
    """(N, H): the backbone's layers from `layer` on, its final norm and last-token pooling, on each input's cached
    states (tokens, H) after its first `layer` layers: what `model.pooled_states` gives on the whole input.
    Right-padded batches of similar lengths; differentiable (a training step) unless called in inference mode."""
    from packing_orca import token_batches

    top = backbone_view(model.backbone, layer, num_layers(model), final_norm=True)
    lengths = [len(s) for s in states]
    budget = model._batch_token_budget(max_batch_tokens, None)
    pooled: list[torch.Tensor | None] = [None] * len(states)
    for batch in token_batches(sorted(range(len(states)), key=lambda i: -lengths[i]), lengths, budget):
        width = max(lengths[i] for i in batch)
        embeds = torch.zeros(len(batch), width, states[batch[0]].shape[-1], dtype=model.backbone.dtype, device=model.device)
        mask = torch.zeros(len(batch), width, dtype=torch.long, device=model.device)
        for row, i in enumerate(batch):
            embeds[row, : lengths[i]] = states[i].to(embeds.device, embeds.dtype)
            mask[row, : lengths[i]] = 1
        positions = torch.arange(width, device=model.device).expand(len(batch), width)  # (B, T): pads after the end
        hidden = top(inputs_embeds=embeds, attention_mask=mask, position_ids=positions).last_hidden_state  # (B, T, H)
        last = torch.tensor([lengths[i] - 1 for i in batch], device=model.device)
        for row, i in enumerate(batch):
            pooled[i] = hidden[row, last[row]]
    return torch.stack(pooled)  # (N, H)


def add_top_lora(model, cfg: dict, k: int):
    """LoRA (`cfg["lora"]`: r, alpha, dropout, targets) on the backbone's last k layers, in place; returns the
    peft wrapper of the backbone (`merge_and_unload` folds the adapters into its weights)."""
    from peft import LoraConfig, get_peft_model

    from training.model import lora_targets

    lora, layers = cfg["lora"], num_layers(model)
    # a regex on the backbone's own module names ("layers.27.mlp.up_proj"): peft's layers_to_transform looks for
    # the layers under a parent module, which the bare backbone does not have
    targets = "|".join(map(re.escape, lora_targets(model, lora)))
    pattern = rf"layers\.({'|'.join(map(str, range(layers - k, layers)))})\..*\b({targets})"
    peft_config = LoraConfig(r=lora["r"], lora_alpha=lora["alpha"], lora_dropout=lora["dropout"], target_modules=pattern)
    return get_peft_model(model.backbone, peft_config)
