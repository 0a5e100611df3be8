"""What a deployment's pages see live, sent by either side: `pushes` (status and launch-phase
pushes to browsers, after commit; the state itself is in the database) and `enginelog` (each
engine's output in a bounded Redis stream, shipped by its host worker, read by the web)."""
