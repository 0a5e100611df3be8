"""A deployment's own Ray cluster over the hosts it spans (vLLM's multi-node executor):
`commands` (ray start argv, env, ports; no Django) and `cluster` (form, join, leave, teardown).
The watchdog's `raynodes` watches the nodes (liveness, failing the deployment, reconcile); it
sits above `transitions`, which tears a cluster down when its deployment ends."""
