"""A scaling policy's settings and their one set of rules (the deployment page's form, the
launch form and the API all check with `PolicySettings.problem`).

It imports nothing of the project: the launch path (lifecycle.services) and the autoscaler
(deployments.autoscale, which imports lifecycle) both use it without an import cycle.
"""

from __future__ import annotations

from dataclasses import dataclass

# The most live replicas a deployment scales to, by hand or by a policy (lifecycle.scaling's
# MAX_REPLICAS; a test holds the two equal).
MAX_REPLICAS = 16


@dataclass(frozen=True, slots=True)
class PolicySettings:
    min_replicas: int
    max_replicas: int
    ttft_p90_s: float | None = None
    tpot_p90_s: float | None = None
    waiting_per_replica: float | None = None
    kv_usage: float | None = None
    up_after_s: float = 15.0
    down_after_s: float = 60.0

    def problem(self) -> str | None:
        if not 0 <= self.min_replicas <= self.max_replicas <= MAX_REPLICAS or self.max_replicas < 1:
            return f"Replicas: 0 ≤ min ≤ max, max from 1 to {MAX_REPLICAS}."
        targets = (self.ttft_p90_s, self.tpot_p90_s, self.waiting_per_replica, self.kv_usage)
        if all(t is None for t in targets):
            return "Give a target: a p90 TTFT or TPOT, waiting requests a replica, or KV usage."
        if any(t is not None and t <= 0 for t in targets):
            return "Targets are positive numbers."
        if self.kv_usage is not None and self.kv_usage > 1:
            return "KV-cache usage is a fraction from 0 to 1 (0.8 = 80 %)."
        if not (1 <= self.up_after_s <= 3600 and 1 <= self.down_after_s <= 86400):
            return "Windows: up after 1 s to 1 h, down after 1 s to 1 day."
        return None


POLICY_FIELDS = tuple(PolicySettings.__dataclass_fields__)
TARGET_FIELDS = ("ttft_p90_s", "tpot_p90_s", "waiting_per_replica", "kv_usage")
