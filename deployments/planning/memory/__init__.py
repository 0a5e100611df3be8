"""What vLLM makes of one TP × PP layout of a model on given GPUs: the settings a request
resolves to (settings.py), weight bytes per rank (weights.py, mixers.py), the KV cache and its
hybrid grouping (kvcache.py, kvgroups.py, kvnotes.py), the profile run's activations
(activation.py), what changes with the vLLM version (versions.py, registry.py), the errors
vLLM raises before it allocates (checks.py, contextpar.py), and the per-GPU sum of all that
(layout.py).

Above ``model``; knows nothing of hosts, inventories or the plan search."""
