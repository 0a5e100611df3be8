"""The GPUs there are and which of them a layout takes: hosts, GPUs and their links
(inventory.py), and TP groups placed on the best-linked GPUs of one host, stages after
(placement.py).

Beside ``memory`` (neither imports the other); knows nothing of models."""
