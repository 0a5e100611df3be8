"""Reading the audit trail's hash chain (auditchain writes it): verification from the first
row or from the last good one, the standing the audit page shows, and exports."""
