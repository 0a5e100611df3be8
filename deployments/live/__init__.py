"""What both sides share live through Redis and the channel layer, never through a disk:
`pushes` (status and launch-phase pushes to browsers, after commit; the state itself is in the
database), `enginelog` (each engine's output in a bounded Redis stream, shipped by its host
worker, read by the web) and `drain` (a replica leaving the gateway's rotation before its engine
is stopped: set by the web's stop and scale-down and by the host worker, read by every web
process's balancer)."""
