"""A ``datasets.GeneratorBasedBuilder`` that builds the same configs programmatically.

    from dataset_builder.hf_builder import OrcaDataset
    b = OrcaDataset(config_name="s3_evouna_nq", scenario="B", fold=2, cache_dir="/tmp/orca")
    b.download_and_prepare(); ds = b.as_dataset()

``data_dir`` (the public data folder), ``release_dir``, ``scenario``, ``fold``, ``seed`` and
``s1_size`` are config keyword arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

import datasets

from orca_io.schema import FEATURES

from .configs import CONFIGS, build_config
from .export import CITATION
from .splits import make_splits


@dataclass
class OrcaConfig(datasets.BuilderConfig):
    scenario: str = "A"
    fold: int = 0
    seed: int = 0
    release_dir: str | None = None
    s1_size: int | None = None


class OrcaDataset(datasets.GeneratorBasedBuilder):
    BUILDER_CONFIG_CLASS = OrcaConfig
    BUILDER_CONFIGS = [OrcaConfig(name=name, description=spec.description) for name, spec in CONFIGS.items()]
    DEFAULT_CONFIG_NAME = "s1_synthetic"

    def _info(self) -> datasets.DatasetInfo:
        return datasets.DatasetInfo(description=self.config.description, features=FEATURES, citation=CITATION)

    def _split_generators(self, dl_manager):
        c = self.config
        build = build_config(c.name, data_dir=c.data_dir, release_dir=c.release_dir, seed=c.seed, s1_size=c.s1_size)
        splits, _ = make_splits(build.records, scenario=c.scenario, fold=c.fold, seed=c.seed)
        names = {"train": datasets.Split.TRAIN, "validation": datasets.Split.VALIDATION, "test": datasets.Split.TEST}
        return [datasets.SplitGenerator(name=names[s], gen_kwargs={"records": splits[s]}) for s in names]

    def _generate_examples(self, records):
        for rec in records:
            yield rec["id"], rec
