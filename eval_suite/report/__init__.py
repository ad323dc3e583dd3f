"""The paper's report and the final evaluation: orca-eval (`cli`, reading and scoring runs in `runs`, its `tables`
and `plots`), the out-of-domain sets (`ood`), train.py's final evaluation (`final_eval`) and the probe suite
(`probes`)."""
