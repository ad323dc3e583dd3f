"""Gradio app of the ORCA metric Space: paste predicted means and human ratings as JSON.

Copied into the Space by `push_to_hub.py metric`, beside the metric script (named after the Space: evaluate.load
fetches NAME.py) and its helper orca_metric_core.py."""

import json
from pathlib import Path

import evaluate
import gradio as gr

HERE = Path(__file__).parent
# the one script that is neither this app nor the metric's helper module: the metric, named after the Space
SCRIPT = next(p for p in sorted(HERE.glob("*.py")) if p.name not in ("app.py", "orca_metric_core.py"))
metric = evaluate.load(str(SCRIPT))


def compute(predictions: str, references: str, prediction_variances: str):
    kwargs = dict(predictions=json.loads(predictions), references=json.loads(references))
    if prediction_variances.strip():
        kwargs["prediction_variances"] = json.loads(prediction_variances)
        return evaluate.load(str(SCRIPT), config_name="with_variance").compute(**kwargs)
    return metric.compute(**kwargs)


gr.Interface(
    fn=compute,
    inputs=[
        gr.Textbox(label="predictions: predicted mean rating per item (JSON list)", value="[4.5, 1.5, 3.0]"),
        gr.Textbox(label="references: human 1-5 ratings per item (JSON list of lists)", value="[[5, 4, 5], [1, 1, 2], [3, 2, 4]]"),
        gr.Textbox(label="prediction_variances (optional, JSON list)", value=""),
    ],
    outputs=gr.JSON(label=SCRIPT.stem),
    title="ORCA rating-distribution metric",
    description=metric.info.description,
).launch()
