"""Writing the audit trail's hash chain: each row carries the SHA-256 of its canonical content,
which includes the hash of the row before it, so a row changed, deleted or inserted out of
order breaks the chain where it happened (audittrail.verify); a database trigger refuses
UPDATE and DELETE on PostgreSQL (migration 0004). Nothing here imports the models: they call
in at every insert."""
