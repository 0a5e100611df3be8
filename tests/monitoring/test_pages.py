"""The topology page and the Prometheus endpoint."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.test import Client

from monitoring.gpus.simulated import SimulatedBackend
from tests.support.monitoring import fill_history, registered

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _cells(html: str, host: str, role: str) -> list[list[str]]:
    section = html.split(f'data-host="{host}"', 1)[1].split("</section>", 1)[0]
    table = section.split(f'data-role="{role}"', 1)[1].split("</table>", 1)[0]
    body = table.split("<tbody>", 1)[1]
    return [
        re.findall(r"<td class=\"[^\"]*\">([^<]*)</td>", row) for row in body.split("</tr>")[:-1]
    ]


def test_topology_matrix_legend_and_warnings(viewer, host_name, tmp_path: Path) -> None:
    mixed = SimulatedBackend("2xRTX4090-24GB@pcie,2xA100-40GB@nvlink", state_dir=tmp_path)
    registered(host_name, mixed)
    html = _client(viewer).get("/gpus/topology/").content.decode()
    matrix = _cells(html, host_name, "matrix")
    assert [row[:4] for row in matrix] == [
        ["X", "PIX", "SYS", "SYS"],
        ["PIX", "X", "SYS", "SYS"],
        ["SYS", "SYS", "X", "NV12"],
        ["SYS", "SYS", "NV12", "X"],
    ]
    p2p = _cells(html, host_name, "p2p")
    assert p2p[0] == ["X", "NS", "NS", "NS"] and p2p[2][3] == "OK"
    for level in ("NV#", "PIX", "PXB", "PHB", "NODE", "SYS", "X"):
        assert f"<dt>{level}</dt>" in html
    assert "would run over PCIe, not NVLink: GPU0–GPU1 (PIX)" in html
    assert "would cross CPU sockets (SYS): GPU0–GPU2" in html
    assert "No peer-to-peer access between: GPU0–GPU1" in html
    assert "simulated GPUs" in html


def test_topology_all_nvlink_has_no_warning(viewer, host_name, sim4) -> None:
    registered(host_name, sim4)
    html = _client(viewer).get("/gpus/topology/").content.decode()
    assert _cells(html, host_name, "matrix")[0][:4] == ["X", "NV18", "NV18", "NV18"]
    assert "topo-warning" not in html


def test_topology_needs_a_role(client, outsider) -> None:
    assert client.get("/gpus/topology/").status_code == 302
    assert _client(outsider).get("/gpus/topology/").status_code == 403


def test_metrics_refused_without_configured_token(client, settings) -> None:
    settings.METRICS_TOKEN = ""
    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer anything")
    assert response.status_code == 403
    assert "METRICS_TOKEN" in response.content.decode()


def test_metrics_need_the_token_and_export_dcgm_gauges(client, settings, host_name, sim4) -> None:
    settings.METRICS_TOKEN = "s3cret-token"
    registered(host_name, sim4)
    fill_history(host_name, sim4, seconds=2)
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-token")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    text = response.content.decode()
    lines = [ln for ln in text.splitlines() if ln.startswith("DCGM_FI_DEV_GPU_UTIL{")]
    mine = [ln for ln in lines if f'Hostname="{host_name}"' in ln]
    assert len(mine) == 4
    assert all(
        'simulated="true"' in ln and 'modelName="NVIDIA H100 80GB HBM3"' in ln for ln in mine
    )
    assert {re.search(r'gpu="(\d)"', ln).group(1) for ln in mine} == {"0", "1", "2", "3"}
    used = [ln for ln in text.splitlines() if ln.startswith("DCGM_FI_DEV_FB_USED{")]
    assert any(f'Hostname="{host_name}"' in ln and ln.endswith(" 512.0") for ln in used)
