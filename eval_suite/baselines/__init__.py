"""The judges ORCA is compared with: reference-similarity baselines (`similarity`: exact match, token F1, BLEU,
ROUGE-L, embedding cosine) and LLM judges (`llm_judge`)."""
