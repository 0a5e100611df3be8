"""Each engine start's own figures beside its plan's, kept as a ``StartObservation`` row.

The launch recorder (``launchphases.Recorder``) reads the figures from the lines the log
shipper hands it (``engines.startup_figures``) and, once the start is over, calls `record`:
the host worker writes the row, like every other row it writes, so the pages and the export
read the database, never a host's file. Never fails the launch: a row it cannot write is a
case lost, logged.
"""

from __future__ import annotations

import logging
from importlib import metadata
from pathlib import Path

from django.db import DatabaseError, IntegrityError, transaction
from django.utils import timezone

from deployments.catalog.modelfiles import ModelFilesError, read_model_folder
from deployments.engines.startup_figures import StartFigures
from deployments.handoff.snapshot import GpuFigures, PlanSnapshot
from deployments.models import Deployment, Engine, GpuLease, Outcome, StartObservation
from deployments.planning import ModelSpec, PlanningError
from deployments.planning.model.families import model_family

log = logging.getLogger(__name__)


def family_of(model_path: str) -> str:
    """The planner's family of a model folder on this host; "" when it has none to read."""
    folder = Path(model_path) if model_path else None
    if folder is None or not folder.is_dir():
        return ""
    try:
        config, summary = read_model_folder(folder)
        return model_family(ModelSpec.from_config(config, safetensors=summary, name=folder.name))
    except (ModelFilesError, PlanningError, OSError, ValueError) as exc:
        log.info("no model family for %s: %s", folder, exc)
        return ""


def record(
    *, deployment_id: int, attempt: int, figures: StartFigures, model_path: str = ""
) -> StartObservation | None:
    """The row of this start (one per start: a second call is a no-op), or None if none was
    written. A start that did not reach ready is kept only when the engine said it was refused
    for memory: that is the planner's costliest error, a false "fits"."""
    outcome = Outcome.FAILED if figures.failure else Outcome.OK
    try:
        d = Deployment.objects.select_related("host").get(pk=deployment_id)
        with transaction.atomic():  # a duplicate rolls back alone, not the caller's transaction
            return StartObservation.objects.create(
                deployment=d,
                attempt=attempt,
                recorded_at=timezone.now(),
                outcome=outcome,
                failure=figures.failure[:300],
                model_family=family_of(model_path),
                **_setup(d),
                **_planned(d.snapshot),
                engine_version=_version(d, figures),
                **_measured(figures),
            )
    except IntegrityError:
        return None  # this start's row is there already
    except (DatabaseError, Deployment.DoesNotExist) as exc:
        log.warning("start figures of deployment %s not recorded: %s", deployment_id, exc)
        return None


def _setup(d: Deployment) -> dict[str, object]:
    e = d.snapshot.engine_args
    lease = (
        GpuLease.objects.filter(deployment=d).select_related("gpu").order_by("gpu__index").first()
    )
    # Simulated GPUs run every engine on the CPU in their place: its figures are no GPU's (a
    # plan made for the CPU keeps its CPU row's name).
    cpu = d.host.simulated and d.snapshot.engine_args.device != "cpu"
    return {
        "engine": d.engine,
        "model_ref": d.snapshot.model_ref or d.model_id,
        "gpu_model": "" if lease is None or cpu else lease.gpu.name,
        "gpu_total_bytes": 0 if lease is None or cpu else lease.gpu.memory_total_bytes,
        "tensor_parallel_size": e.tensor_parallel_size,
        "pipeline_parallel_size": e.pipeline_parallel_size,
        "max_model_len": e.max_model_len,
        "gpu_memory_utilization": e.gpu_memory_utilization,
        "dtype": e.dtype or "",
        "quantization": e.quantization or "",
        "kv_cache_dtype": e.kv_cache_dtype or "",
        "block_size": e.block_size,
    }


def _version(d: Deployment, figures: StartFigures) -> str:
    """The version the engine printed; transformers serve prints none, and the host runs the
    `transformers` of its own environment (``transformers_serve.default_executable``)."""
    if figures.engine_version or d.engine != Engine.TRANSFORMERS:
        return figures.engine_version
    try:
        return metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return ""


def _planned(plan: PlanSnapshot) -> dict[str, object]:
    first = plan.per_gpu[0] if plan.per_gpu else GpuFigures()
    known = bool(plan.per_gpu)
    return {
        "planned_fits": plan.fits,
        "planned_weights_bytes": first.weights_bytes if known else None,
        "planned_kv_tokens": plan.kv_cache_tokens,
        "planned_kv_bytes": first.kv_cache_bytes if known else None,
        "planned_cuda_graph_bytes": first.cuda_graph_bytes if known else None,
        "planned_correction_bytes": first.correction_bytes,
    }


def _measured(f: StartFigures) -> dict[str, object]:
    return {
        "measured_weights_bytes": f.weights_bytes,
        "measured_kv_tokens": f.kv_tokens,
        "measured_kv_bytes": f.kv_bytes,
        "measured_cuda_graph_bytes": f.cuda_graph_bytes,
        "measured_weight_tensors": f.weight_tensors,
    }
