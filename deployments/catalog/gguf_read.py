"""Reading GGUF headers for the planner: a local ``.gguf`` file, or the first bytes of one.

The impure edge of ``planning.model.gguf``: the ``gguf`` package parses, this module hands
plain values on. A header alone is enough: tensor names, types and sizes sit before the data,
so a Hub file is planned from a ranged read of its first megabytes (``hub.gguf``), written
into a sparse file of the full size that ``GGUFReader`` maps without touching the rest.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deployments.planning import GgufSpec, GgufTensor, ModelSpecError, gguf_spec

GGUF_MAGIC = b"GGUF"
# "…-00001-of-00003.gguf": llama.cpp's gguf-split names; llama-server is given the first part.
SPLIT_PART = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$")
# Quantization as GGUF repos name their files: "Model-Q4_K_M.gguf", "model.IQ3_XXS.gguf".
QUANT_IN_NAME = re.compile(
    r"(?i)(?:^|[-_.])(?P<quant>(?:I?Q\d(?:_[A-Z0-9]+)*)|BF16|F16|F32|MXFP4(?:_MOE)?)"
    r"(?:-\d{5}-of-\d{5})?\.gguf$"
)
_LONG_ARRAY = 64  # string arrays longer than this (vocab, merges) are kept as their length only
_LONG_NUMBERS = 1024  # per-block arrays are shorter; token types and scores are not


class GgufReadError(ValueError):
    """Not a readable GGUF header; the message is one line for the user."""


@dataclass(frozen=True, slots=True)
class GgufHeader:
    metadata: dict[str, object]
    tensors: tuple[GgufTensor, ...]
    data_offset: int  # where the tensor data begins: the header's length


def quant_from_name(filename: str) -> str:
    """The quantization a file's name states ("Q4_K_M"), "" when it states none."""
    match = QUANT_IN_NAME.search(Path(filename).name)
    return match["quant"].upper() if match else ""


def split_parts(filename: str) -> tuple[str, int, int] | None:
    """(stem, part, count) of a split GGUF part's name; None for a single file."""
    match = SPLIT_PART.match(Path(filename).name)
    return (match["stem"], int(match["part"]), int(match["count"])) if match else None


def _value(field: Any) -> object:
    import gguf

    types = field.types
    if types and types[0] == gguf.GGUFValueType.ARRAY:
        count = len(field.data)
        if len(types) > 1 and types[1] == gguf.GGUFValueType.STRING and count > _LONG_ARRAY:
            return range(count)  # a Sequence with the right length, without decoding 150k strings
        if count > _LONG_NUMBERS:
            return range(count)
    return field.contents()


def read_header(path: Path) -> GgufHeader:
    """Metadata and tensor list of a GGUF file (or of a sparse file holding only its header)."""
    try:
        with path.open("rb") as fh:
            if fh.read(4) != GGUF_MAGIC:
                raise GgufReadError(f"{path.name}: not a GGUF file")
        import gguf

        reader = gguf.GGUFReader(str(path))
    except GgufReadError:
        raise
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise GgufReadError(f"{path.name}: unreadable GGUF header ({exc})") from None
    metadata = {
        name: _value(field) for name, field in reader.fields.items() if not name.startswith("GGUF.")
    }
    tensors = tuple(
        GgufTensor(t.name, t.tensor_type.name, int(t.n_elements), int(t.n_bytes))
        for t in reader.tensors
    )
    return GgufHeader(metadata, tensors, int(reader.data_offset))


def header_from_prefix(prefix: bytes, total_bytes: int) -> GgufHeader | None:
    """The header from a file's first bytes; None when they end before the header does."""
    with tempfile.NamedTemporaryFile(suffix=".gguf") as sparse:
        sparse.write(prefix)
        sparse.truncate(max(total_bytes, len(prefix)))
        sparse.flush()
        try:
            header = read_header(Path(sparse.name))
        except GgufReadError:
            # Parsing ran into the zeros past the prefix (e.g. duplicate empty tensor names).
            return None
    # Entries past the prefix were parsed from zeros, and a parse that went there ends past it.
    return header if header.data_offset <= len(prefix) else None


def spec_from_headers(headers: Iterable[GgufHeader], *, name: str) -> GgufSpec:
    """One model from its header(s): a split file's parts each list their own tensors."""
    headers = list(headers)
    if not headers:
        raise GgufReadError(f"{name}: no GGUF header")
    tensors = tuple(t for header in headers for t in header.tensors)
    try:
        return gguf_spec(headers[0].metadata, tensors, name=name)
    except ModelSpecError as exc:
        raise GgufReadError(f"{name}: {exc}") from None


def local_gguf_spec(path: Path) -> GgufSpec:
    """The spec of a local ``.gguf`` file; for a split model, of all its parts beside it."""
    parts = split_parts(path.name)
    if parts is None:
        return spec_from_headers([read_header(path)], name=path.stem)
    stem, _, count = parts
    files = [path.with_name(f"{stem}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise GgufReadError(f"{stem}: split GGUF parts missing: {', '.join(missing)}")
    return spec_from_headers((read_header(f) for f in files), name=stem)
