"""The plan search: a ``PlanRequest`` (request.py) over an inventory, every TP × PP layout
sized (memory), placed (fleet), judged against the error margin (margin.py) and the GPUs'
other tenants (sharing.py), its replicas taken (replica_choice.py) and ranked (choice.py)
into ``Plan``s (plans.py, search.py) with the engine settings they rely on
(engine_settings.py; the engine adapters render commands from them); their JSON views
(result.py).

The planner's top layer: nothing below imports it."""
