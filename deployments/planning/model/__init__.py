"""What a model is, read from its config.json: ``ModelSpec`` (spec.py) with the config fields
each family names differently (config_fields.py), which cache each decoder layer keeps
(layers.py, with the per-sequence states of linear-attention and Mamba layers in states.py),
how a quantized checkpoint stores its weights (quant.py, quantspec.py, modelopt.py), vision
towers (vision.py), and the family and format notes an operator sees (families.py,
formatnotes.py).

The planner's lowest layer: it knows nothing of GPUs, vLLM versions or plans, and imports
only ``..errors`` and ``..units`` (an import-linter ``layers`` contract holds it)."""
