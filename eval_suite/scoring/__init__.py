"""Scoring a JSONL file with a judge: orca-score (`cli`), the model flags every scoring command shares (`cli_args`),
the library behind it (`scorer`: `ScoreOptions`, `score_file`), its partial files (`sharding`), and what turns the
head's outputs into the scores users get: the clamping threshold (`clamping`) and the dev calibration (`calibration`)."""
