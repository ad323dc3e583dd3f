"""The model a run trains: an ORCA model on its backbone (or a tiny random stand-in), LoRA, wrappers unwrapped."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from modeling_orca import OrcaForCorrectnessDistribution

# LoRA targets per architecture family: attention and MLP projections
LORA_TARGETS = {
    "bert": ["query", "key", "value", "dense"],
    "default": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
}


def tiny_backbone_config(kind: str, vocab_size: int):
    """A 2-layer random backbone of each paper architecture (`model.backbone: tiny-llama` etc.): fast tests and
    smoke runs of the paper configs."""
    from transformers import BertConfig, Gemma3TextConfig, LlamaConfig, Olmo2Config

    common = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=vocab_size)
    if kind == "llama":
        return LlamaConfig(num_key_value_heads=2, **common)
    if kind == "olmo2":
        return Olmo2Config(num_key_value_heads=2, **common)
    if kind == "gemma3":
        return Gemma3TextConfig(num_key_value_heads=2, head_dim=8, sliding_window=16, **common)
    if kind == "bert":
        return BertConfig(max_position_embeddings=512, **common)
    raise ValueError(f"no tiny backbone {kind!r}; choose llama, olmo2, gemma3 or bert")


def resolve_backbone(name: str) -> str:
    """The folder of an offline backbone named in eval_suite.models.backbones.BACKBONES; any other name as it is."""
    from eval_suite.models.backbones import BACKBONES

    return str(BACKBONES[name]()) if name in BACKBONES else name


def build_model(cfg: dict):
    """(model, tokenizer) of `cfg["model"]`, the head initialised from `cfg["seed"]`."""
    import torch
    from transformers import AutoTokenizer

    from configuration_orca import OrcaConfig
    from modeling_orca import OrcaForCorrectnessDistribution
    from processing_orca import set_pad_token

    m = cfg["model"]
    orca_kwargs = dict(m["orca"], score_type=m["score_type"], pooling=m["pooling"])
    if m["backbone"].startswith("tiny-"):
        kind = m["backbone"][len("tiny-") :]
        tokenizer = AutoTokenizer.from_pretrained(resolve_backbone("minilm" if kind == "bert" else "smollm2"))
        torch.manual_seed(cfg["seed"])
        model = OrcaForCorrectnessDistribution(
            OrcaConfig(backbone_config=tiny_backbone_config(kind, len(tokenizer)), **orca_kwargs)
        )
        if m["backbone_layers"] is not None:
            keep_first_layers(model, m["backbone_layers"])
        return model, set_pad_token(tokenizer, m["backbone"])
    torch.manual_seed(cfg["seed"])  # the head's initialisation
    folder = resolve_backbone(m["backbone"])
    dtype = getattr(torch, m["dtype"]) if m["dtype"] else None
    model, tokenizer = OrcaForCorrectnessDistribution.from_backbone(folder, revision=m["revision"], dtype=dtype, **orca_kwargs)
    if m["backbone_layers"] is not None:
        keep_first_layers(model, m["backbone_layers"])
    if m["head_init"] == "verdict":
        init_head_from_verdict(model, tokenizer, folder, m["verdict_tokens"])
    return model, tokenizer


def keep_first_layers(model, n: int) -> None:
    """The backbone cut to its first n decoder layers, in place; its final norm stays, so the head reads layer n's
    state normalised as the last layer's would be. The backbone's config (the one the ORCA config holds) says n,
    so the saved judge loads as an ordinary model of that depth and scores at n / L of the cost."""
    from torch import nn

    backbone = model.backbone
    if not isinstance(getattr(backbone, "layers", None), nn.ModuleList) or not hasattr(backbone, "norm"):
        raise SystemExit(f"model.backbone_layers needs a causal decoder with a `layers` list and a final `norm` "
                         f"(Llama, Qwen2, OLMo 2, Gemma 3); this backbone is {type(backbone).__name__}")
    if not 0 < n <= len(backbone.layers):
        raise SystemExit(f"model.backbone_layers is {n}; the backbone has {len(backbone.layers)} layers")
    backbone.layers = nn.ModuleList(backbone.layers[:n])
    for config in {id(c): c for c in (backbone.config, model.config.backbone_config)}.values():  # one object or a copy
        config.num_hidden_layers = n
        if getattr(config, "layer_types", None):
            config.layer_types = config.layer_types[:n]


def lm_head_rows(folder: str, model, token_ids: list[int]):
    """(len(token_ids), H) float32: the backbone's output-embedding rows of `token_ids`, read from the checkpoint's
    safetensors (`lm_head.weight`; the input embeddings when they are tied), without loading the LM head."""
    import json
    from pathlib import Path

    import torch
    from safetensors import safe_open

    if model.backbone.config.get_text_config().tie_word_embeddings:
        return model.backbone.get_input_embeddings().weight[token_ids].detach().float()
    index = Path(folder) / "model.safetensors.index.json"
    file = json.loads(index.read_text())["weight_map"]["lm_head.weight"] if index.exists() else "model.safetensors"
    with safe_open(Path(folder) / file, framework="pt") as fh:
        return fh.get_slice("lm_head.weight")[token_ids].to(torch.float32)


def init_head_from_verdict(model, tokenizer, folder: str, verdict_tokens: list[str]) -> None:
    """The head as the backbone's own verdict, with the input ending where the LM would answer (a chat template's
    assistant turn). Two tokens (yes, no): d = logit(yes) - logit(no) = (w_yes - w_no) . h, and the head outputs d
    times the head's direction that moves the rating up; for the Bernoulli head the mean is then 1 + 4 P(yes | yes or
    no), the zero-shot reading, for the others a monotone function of it that training starts from. One token per
    rating (e.g. the digits "1" ... "5"), for a head with a logit per rating: those logits are the LM's, so the
    head's distribution is P(rating k | one of the rating tokens)."""
    import torch

    from heads_orca import head_for

    head = head_for(model.config)
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in verdict_tokens]
    per_rating = len(ids) != 2 and len(ids) == model.config.num_ratings and head.logit_per_rating  # 2: always yes, no
    if (len(ids) != 2 and not per_rating) or any(len(i) != 1 for i in ids):
        raise SystemExit(f"model.verdict_tokens {verdict_tokens} must be two words (yes, no) or, for a head with a logit "
                         f"per rating, {model.config.num_ratings} (lowest rating first), each one token; got ids {ids}")  # fmt: skip
    rows = lm_head_rows(folder, model, [i[0] for i in ids])  # (2 or K, H)
    with torch.no_grad():
        if per_rating:
            model.score_head.weight.copy_(rows)
        else:
            direction = head.shift_direction().float()  # (num_head_outputs,)
            model.score_head.weight.copy_(direction[:, None] * (rows[0] - rows[1])[None, :])
        model.score_head.bias.zero_()


def add_lora(model, cfg: dict):
    """The model with LoRA adapters (`cfg["lora"]`) and its head trained fully; unchanged when LoRA is off."""
    lora = cfg["lora"]
    if not lora["enabled"]:
        return model
    from peft import LoraConfig, get_peft_model

    peft_config = LoraConfig(
        r=lora["r"], lora_alpha=lora["alpha"], lora_dropout=lora["dropout"], target_modules=lora_targets(model, lora),
        modules_to_save=["score_head"],  # the head is trained fully
    )
    return get_peft_model(model, peft_config)


def lora_targets(model, lora: dict) -> list[str]:
    """`lora.target_modules`, "auto" resolved to the architecture family's attention and MLP projections."""
    if lora["target_modules"] != "auto":
        return lora["target_modules"]
    return LORA_TARGETS["bert" if model.config.backbone_config.model_type == "bert" else "default"]


def unwrap_orca(model) -> OrcaForCorrectnessDistribution:
    """The ORCA model inside DDP / PEFT wrappers (for predict: LoRA layers stay active)."""
    model = getattr(model, "module", model)
    if hasattr(model, "get_base_model"):
        model = model.get_base_model()
    return model


def trainable_names(model) -> list[str]:
    model = getattr(model, "module", model)
    return [n for n, p in model.named_parameters() if p.requires_grad]


def load_trainable_state(model, state: dict[str, torch.Tensor]) -> None:
    """Copy saved trained weights into `model`, refusing a state that does not hold exactly its trained ones."""
    model = getattr(model, "module", model)
    params = dict(model.named_parameters())
    missing = [n for n, p in params.items() if p.requires_grad and n not in state]
    unknown = [n for n in state if n not in params]
    if missing or unknown:
        raise RuntimeError(f"checkpoint does not match the model: missing {missing[:3]}, unexpected {unknown[:3]}")
    import torch

    with torch.no_grad():
        for name, value in state.items():
            params[name].copy_(value)
