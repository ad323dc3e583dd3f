"""ORCA annotations as a Hugging Face dataset: one record schema, readers, stage builders,
filters, splits, statistics and a Hub-ready export. See docs/dataset_builder.md."""

from .configs import CONFIGS, build_config, load_config
from .readers import ReadResult, iter_records, read_records
from .schema import FEATURES, FLAGS, STAGES, RecordError, make_record, validate_record

__all__ = ["CONFIGS", "FEATURES", "FLAGS", "STAGES", "ReadResult", "RecordError", "build_config", "iter_records",
           "load_config", "make_record", "read_records", "validate_record"]
