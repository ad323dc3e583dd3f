"""Everything that scores or evaluates a judge, one folder per job: `scoring` (orca-score and the scoring library),
`models` (loading a judge, the released judges, the backbones), `report` (orca-eval, the final evaluation, the
probes), `baselines` (reference-similarity and LLM judges), `leaderboard` (orca-leaderboard and its web app),
`orca_metric` (the evaluate metric); `metrics` holds the paper's metrics, which all of them use. See
docs/eval_suite.md."""
