from __future__ import annotations

from pathlib import Path

import pytest

from deployments.catalog.local import LocalModelError, list_local, resolve_local
from tests.support.hubstub.repos import FIXTURES, safetensors_file

QWEN_CONFIG = FIXTURES / "configs" / "Qwen__Qwen2.5-7B-Instruct.json"


def make_model(folder: Path, *, params: int = 1000) -> int:
    """A model folder with a real config.json and a small real safetensors file; its size."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_bytes(QWEN_CONFIG.read_bytes())
    header, size, _ = safetensors_file(0, {"BF16": params})
    (folder / "model.safetensors").write_bytes(header.ljust(size, b"\0"))
    return len(QWEN_CONFIG.read_bytes()) + size


@pytest.fixture
def roots(tmp_path: Path) -> list[Path]:
    first, second = tmp_path / "models", tmp_path / "scratch"
    first.mkdir()
    second.mkdir()
    return [first, second]


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "elsewhere" / "secret-model"
    make_model(folder)
    return folder


def test_lists_folders_with_config_json(roots: list[Path]) -> None:
    size = make_model(roots[0] / "Qwen" / "Qwen2.5-7B-Instruct", params=1234)
    make_model(roots[1] / "tiny")
    (roots[0] / "not-a-model").mkdir()
    (roots[0] / "not-a-model" / "notes.txt").write_text("hello")
    models = list_local(roots)
    assert [(m.root_index, m.relative_path) for m in models] == [
        (0, "Qwen/Qwen2.5-7B-Instruct"),
        (1, "tiny"),
    ]
    qwen = models[0]
    assert qwen.name == "Qwen2.5-7B-Instruct" and qwen.root_name == "models"
    assert qwen.architecture == "Qwen2ForCausalLM"
    assert qwen.context_length == 32768
    assert qwen.parameters == 1234
    assert qwen.size_bytes == size
    assert qwen.error is None


def test_listing_never_follows_links_out(roots: list[Path], outside: Path) -> None:
    (roots[0] / "linked-dir").symlink_to(outside, target_is_directory=True)
    trap = roots[0] / "trap"
    trap.mkdir()
    (trap / "config.json").symlink_to(outside / "config.json")
    inside = roots[0] / "real"
    make_model(inside)
    (inside / "extra.safetensors").symlink_to(outside / "model.safetensors")
    models = list_local(roots)
    assert [m.relative_path for m in models] == ["real"]
    # the linked-out weights are neither counted nor read
    assert models[0].parameters == 1000


def test_broken_config_is_listed_with_a_reason(roots: list[Path]) -> None:
    folder = roots[0] / "broken"
    folder.mkdir()
    (folder / "config.json").write_text("{not json")
    (model,) = list_local(roots)
    assert model.error is not None and "not valid JSON" in model.error


def test_resolve_by_index_and_by_name(roots: list[Path]) -> None:
    make_model(roots[1] / "org" / "m")
    expected = (roots[1] / "org" / "m").resolve()
    assert resolve_local(1, "org/m", roots=roots) == expected
    assert resolve_local("1", "org/m", roots=roots) == expected
    assert resolve_local("scratch", "org/m", roots=roots) == expected


def test_resolve_accepts_links_that_stay_inside(roots: list[Path]) -> None:
    make_model(roots[0] / "blobs" / "snapshot")
    (roots[0] / "alias").symlink_to(roots[0] / "blobs" / "snapshot")
    assert resolve_local(0, "alias", roots=roots) == (roots[0] / "blobs" / "snapshot").resolve()


@pytest.mark.parametrize(
    ("relative", "message"),
    [
        ("../elsewhere/secret-model", "contains '..'"),
        ("org/../../elsewhere/secret-model", "contains '..'"),
        ("..\\elsewhere\\secret-model", "contains '..'"),
        ("/etc", "is absolute"),
        ("C:\\Windows", "is absolute"),
        ("bad\0name", "NUL"),
    ],
)
def test_resolve_refuses_traversal(
    roots: list[Path], outside: Path, relative: str, message: str
) -> None:
    with pytest.raises(LocalModelError, match=message):
        resolve_local(0, relative, roots=roots)


def test_resolve_refuses_absolute_path_into_a_root(roots: list[Path]) -> None:
    make_model(roots[0] / "m")
    with pytest.raises(LocalModelError, match="is absolute"):
        resolve_local(0, str(roots[0] / "m"), roots=roots)


def test_resolve_refuses_symlink_out(roots: list[Path], outside: Path) -> None:
    (roots[0] / "escape").symlink_to(outside, target_is_directory=True)
    with pytest.raises(LocalModelError, match="leads outside model root 'models'"):
        resolve_local(0, "escape", roots=roots)


def test_resolve_refuses_config_linked_out(roots: list[Path], outside: Path) -> None:
    folder = roots[0] / "half"
    folder.mkdir()
    (folder / "config.json").symlink_to(outside / "config.json")
    with pytest.raises(LocalModelError, match=r"no config\.json"):
        resolve_local(0, "half", roots=roots)


def test_resolve_refuses_a_link_into_another_root(roots: list[Path]) -> None:
    make_model(roots[1] / "other")
    (roots[0] / "cross").symlink_to(roots[1] / "other")
    with pytest.raises(LocalModelError, match="leads outside"):
        resolve_local(0, "cross", roots=roots)


@pytest.mark.parametrize(
    ("root", "relative", "message"),
    [
        (5, "m", "no model root number 5"),
        ("nope", "m", "no single model root named 'nope'"),
        (0, "missing", "No folder 'missing'"),
        (0, "plain", "not a model folder"),
    ],
)
def test_resolve_errors(roots: list[Path], root: object, relative: str, message: str) -> None:
    (roots[0] / "plain").mkdir()
    with pytest.raises(LocalModelError, match=message):
        resolve_local(root, relative, roots=roots)  # type: ignore[arg-type]


def test_missing_root_is_skipped(tmp_path: Path) -> None:
    assert list_local([tmp_path / "absent"]) == ()
