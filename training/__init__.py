"""The pieces of `train.py`, one job per module: config (the run config and its checks), model (backbone, LoRA),
data (a stage's records), batching (global batches and micro-batches), schedule (LR and early stopping),
checkpoints (resumable state and best weights), stages (one stage's training loop).

Nothing here imports torch or transformers at module level: `train.py --help` and a config error answer at once.
"""
