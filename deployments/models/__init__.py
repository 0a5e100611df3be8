"""Deployments, their GPU leases and timelines (`core`), the Ray node of each host a
deployment spans (`raynode`), model weights on the hosts (`weights`), the phases of an engine's
start (`launchphases`), what each start printed beside its plan (`observations`), and a deployment's state derived from its replicas' (`replicas`, no
model), its scaling policy (`autoscale`), the engines each host prepared (`engineprep`), its LoRA
adapters (`adapters`). One package so that no module grows past a screenful of models; every caller
imports from here."""

from .adapters import AdapterReplica, AdapterStatus, DeploymentAdapter
from .autoscale import ScalingPolicy
from .core import (
    ACTIVE,
    HOLDS_NAME,
    TERMINAL,
    Deployment,
    DeploymentEvent,
    Engine,
    GpuLease,
    HubConfig,
    Status,
    can_move,
)
from .engineprep import EnginePrep, PrepState
from .launchphases import LaunchPhase, Phase
from .observations import Outcome, StartObservation
from .raynode import RayNode
from .weights import CachedModel, DownloadStatus, HostDisk, ModelDownload

__all__ = [
    "ACTIVE",
    "HOLDS_NAME",
    "TERMINAL",
    "AdapterReplica",
    "AdapterStatus",
    "CachedModel",
    "Deployment",
    "DeploymentAdapter",
    "DeploymentEvent",
    "DownloadStatus",
    "Engine",
    "EnginePrep",
    "GpuLease",
    "HostDisk",
    "HubConfig",
    "LaunchPhase",
    "ModelDownload",
    "Outcome",
    "Phase",
    "PrepState",
    "RayNode",
    "ScalingPolicy",
    "StartObservation",
    "Status",
    "can_move",
]
