"""Deployments, their GPU leases and timelines (`core`), the Ray node of each host a
deployment spans (`raynode`), and model weights on the hosts with the steps of a start
(`weights`). One package so that no module grows past a screenful of models; every caller
imports from here."""

from .core import (
    ACTIVE,
    TERMINAL,
    Deployment,
    DeploymentEvent,
    Engine,
    GpuLease,
    HubConfig,
    Status,
    can_move,
)
from .raynode import RayNode
from .weights import CachedModel, DownloadStatus, HostDisk, LaunchPhase, ModelDownload, Phase

__all__ = [
    "ACTIVE",
    "TERMINAL",
    "CachedModel",
    "Deployment",
    "DeploymentEvent",
    "DownloadStatus",
    "Engine",
    "GpuLease",
    "HostDisk",
    "HubConfig",
    "LaunchPhase",
    "ModelDownload",
    "Phase",
    "RayNode",
    "Status",
    "can_move",
]
