"""What every part of orca reads and writes with: files put in place atomically (`files`), the record schema
(`schema`), the JSON Lines and records readers (`jsonl`), Markdown tables (`tables`) and the package's version
(`version`). Imports nothing of eval_suite, training or dataset_builder, so each of them may import it."""
