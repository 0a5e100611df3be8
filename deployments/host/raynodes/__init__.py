"""A deployment's own Ray cluster over the hosts it spans (vLLM's multi-node executor):
`commands` (ray start argv, env, ports; no Django), `cluster` (form, join, leave, teardown),
and `deployments.host.raywatch` (node liveness, failing the deployment, reconcile)."""
