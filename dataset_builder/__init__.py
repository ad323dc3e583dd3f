"""ORCA annotations as a Hugging Face dataset: readers of each source, stage builders, filters, splits, statistics
and a Hub-ready export (the record schema and the records reader they use: orca_io). See docs/dataset_builder.md."""

from .configs import CONFIGS, build_config, load_config

__all__ = ["CONFIGS", "build_config", "load_config"]
