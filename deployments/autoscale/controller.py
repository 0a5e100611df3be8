"""One pass of the autoscaler over every enabled policy: scrape, record, decide, act.

Runs in whichever host worker holds the fleet-wide lease (deployments.host.autoscaler). It
keeps each replica's last histogram snapshot in memory, so a window is the difference of two
scrapes; a replica seen for the first time (or after the lease moved) gives figures from its
second scrape on. A change goes through `lifecycle.scaling.deployment_scale` as the policy's
operator: the planner places new replicas, quotas and leases decide, scale-down drains.
"""

from __future__ import annotations

import logging
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import transaction

from controlpanel.audit import audit_record
from controlpanel.models import AuditEvent
from deployments.autoscale import series
from deployments.autoscale.decide import Decision, Observation, Policy, decide
from deployments.autoscale.quantiles import delta, merged, quantile
from deployments.autoscale.scrape import ReplicaMetrics, scrape
from deployments.lifecycle.errors import DeploymentError
from deployments.lifecycle.scaling import deployment_scale
from deployments.models import ACTIVE, Deployment, ScalingPolicy, Status

log = logging.getLogger(__name__)
# A sleeping deployment is the idle sleep's (deployments.host.idle): its next request wakes it,
# and the controller neither adds replicas to it nor counts it calm enough to remove one.
LIVE = frozenset(ACTIVE) - {Status.STOPPING, Status.SLEEPING}


@dataclass
class Controller:
    previous: dict[int, ReplicaMetrics] = field(default_factory=dict)
    last_tick_s: dict[int, float] = field(default_factory=dict)

    def forget(self) -> None:
        """The lease went elsewhere: whatever was kept is stale when it comes back."""
        self.previous.clear()
        self.last_tick_s.clear()

    def tick(self, *, now_s: float) -> list[Decision]:
        policies = ScalingPolicy.objects.filter(
            enabled=True, deployment__status__in=LIVE
        ).select_related("deployment", "deployment__host", "set_by")
        return [self.one(policy, now_s=now_s) for policy in policies]

    def one(self, policy: ScalingPolicy, *, now_s: float) -> Decision:
        first = policy.deployment
        live = [r for r in first.group() if r.status in LIVE]
        running = [r for r in live if r.status == Status.RUNNING]
        with ThreadPoolExecutor(max(1, len(running))) as pool:
            scraped = dict(
                zip(running, pool.map(lambda r: scrape(r.base_url), running), strict=True)
            )
        answered = {r: m for r, m in scraped.items() if m is not None}
        observation, extra = self._observe(first, live, answered, now_s)
        rule = as_rule(policy, first)
        window = series.observations(
            first.pk, since_s=now_s - max(rule.up_after_s, rule.down_after_s) - 1
        )
        last_change = policy.last_change_at.timestamp() if policy.last_change_at else None
        decision = decide(rule, [*window, observation], last_change_s=last_change, now_s=now_s)
        series.append(first.pk, observation, extra | {"decision": decision.reason})
        if decision.changed:
            apply(policy, decision, observation, now_s=now_s)
        return decision

    def _observe(
        self,
        first: Deployment,
        live: list[Deployment],
        answered: dict[Deployment, ReplicaMetrics],
        now_s: float,
    ) -> tuple[Observation, dict[str, Any]]:
        ttft, tpot = [], []
        for row, metrics in answered.items():
            before = self.previous.get(row.pk)
            self.previous[row.pk] = metrics
            if before is not None:
                ttft.append(delta(metrics.ttft, before.ttft))
                tpot.append(delta(metrics.tpot, before.tpot))
        ttft_window = merged(ttft)
        since = self.last_tick_s.get(first.pk, now_s - 5)
        self.last_tick_s[first.pk] = now_s
        gateway = gateway_figures([r.pk for r in live] + [first.pk], since_s=since)
        engine_p90 = quantile(0.9, ttft_window)
        seen = [v for v in (engine_p90, gateway["gateway_ttft_p90_s"]) if v is not None]
        figures = list(answered.values())
        observation = Observation(
            at_s=now_s,
            replicas=len(live),
            serving=len(figures),
            requests=int(ttft_window.get(math.inf, 0.0)),
            # What the client sees: the gateway's own TTFT where it is longer than the engine's.
            ttft_p90_s=max(seen) if seen else None,
            tpot_p90_s=quantile(0.9, merged(tpot)),
            waiting=sum(m.waiting for m in figures),
            running=sum(m.running for m in figures),
            kv_usage=sum(m.kv_usage for m in figures) / len(figures) if figures else 0.0,
        )
        return observation, gateway | {"engine_ttft_p90_s": engine_p90}


def as_rule(policy: ScalingPolicy, first: Deployment) -> Policy:
    return Policy(
        min_replicas=policy.min_replicas,
        max_replicas=policy.max_replicas,
        ttft_p90_s=policy.ttft_p90_s,
        tpot_p90_s=policy.tpot_p90_s,
        waiting_per_replica=policy.waiting_per_replica,
        kv_usage=policy.kv_usage,
        up_after_s=policy.up_after_s,
        down_after_s=policy.down_after_s,
        capacity_per_replica=first.snapshot.engine_args.max_num_seqs,
    )


def gateway_figures(ids: list[int], *, since_s: float) -> dict[str, Any]:
    """The gateway's own per-request rows since the last pass: count, 5xx, p90 TTFT."""
    rows = AuditEvent.objects.filter(
        action="playground.request",
        target_type="deployment",
        target_id__in=[str(i) for i in set(ids)],
        created_at__gte=datetime.fromtimestamp(since_s, tz=UTC),
    ).values_list("detail", flat=True)
    details = list(rows)
    ttfts = sorted(d["ttft_ms"] / 1000 for d in details if d.get("ttft_ms") is not None)
    errors = sum(1 for d in details if (d.get("http_status") or 200) >= 500)
    p90 = ttfts[min(len(ttfts) - 1, math.ceil(0.9 * len(ttfts)) - 1)] if ttfts else None
    return {"gateway_requests": len(details), "gateway_errors": errors, "gateway_ttft_p90_s": p90}


def apply(policy: ScalingPolicy, decision: Decision, seen: Observation, *, now_s: float) -> None:
    first = policy.deployment
    detail = {
        "name": first.name,
        "reason": decision.reason,
        "replicas_before": decision.current,
        "replicas": decision.replicas,
        "figures": {k: getattr(seen, k) for k in Observation.__dataclass_fields__},
        "by": "autoscaler",
    }
    try:
        with transaction.atomic():
            deployment_scale(user=policy.set_by, deployment=first, replicas=decision.replicas)
            audit_record(
                actor=policy.set_by,
                action="deployment.autoscale",
                target_type="deployment",
                target_id=first.pk,
                detail=detail,
            )
            changed_at = datetime.fromtimestamp(now_s, tz=UTC)
            ScalingPolicy.objects.filter(pk=policy.pk).update(
                last_change_at=changed_at, last_decision=decision.reason
            )
    except DeploymentError as exc:
        refused = f"{decision.reason}: refused, {exc}"
        log.info("autoscale %s: %s", first.name, refused)
        if policy.last_decision != refused:  # one row per new refusal, not one per pass
            with transaction.atomic():
                audit_record(
                    actor=policy.set_by,
                    action="deployment.autoscale",
                    target_type="deployment",
                    target_id=first.pk,
                    detail=detail | {"refused": str(exc)},
                )
                ScalingPolicy.objects.filter(pk=policy.pk).update(last_decision=refused)
