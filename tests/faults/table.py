"""The fault suite's table (pure: bench/faults.py prints it without Django)."""

from __future__ import annotations

from typing import Any


def table(rows: list[dict[str, Any]]) -> str:
    head = ("fault", "user can act again (s)", "stuck", "leases leaked", "orphaned", "audit lost")
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for r in rows:
        cells = (r["fault"], f"{r['act_again_s']:.1f}", r["stuck"], r["leases_leaked"])
        lines.append(" | ".join(str(c) for c in (*cells, r["orphaned"], r["audit_lost"])))
    return "\n".join(lines)
