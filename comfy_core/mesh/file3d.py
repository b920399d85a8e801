"""ComfyUI's `File3D` value (behaviour of today's comfy_api `Types.File3D`,
comfy_api/latest/_util/geometry_types.py): a 3-D model file held in memory (a binary stream) or
on disk (a path), with its format (`glb`, `obj`, ...: no dot, lower case; taken from a path's
suffix when not given). MeshToFile3D makes one in memory; `comfy_api_nodes.util`'s
`download_url_to_file_3d` returns one to packs (compat/api_nodes_download.py)."""
from __future__ import annotations

import shutil
from io import BytesIO
from pathlib import Path
from typing import IO


class File3D:
    def __init__(self, source: "str | IO[bytes]", file_format: str = "") -> None:
        self._source = source
        self._format = ""
        self.format = file_format or (Path(source).suffix if isinstance(source, str) else "")

    @property
    def format(self) -> str:
        return self._format

    @format.setter
    def format(self, value: str) -> None:
        self._format = value.lstrip(".").lower() if value else ""

    @property
    def is_disk_backed(self) -> bool:
        return isinstance(self._source, str)

    def _rewound(self) -> "IO[bytes]":
        stream = self._source
        if hasattr(stream, "seek"):
            stream.seek(0)
        return stream

    def get_source(self) -> "str | IO[bytes]":
        """The path, or the stream rewound to its start."""
        return self._source if isinstance(self._source, str) else self._rewound()

    def get_data(self) -> BytesIO:
        """The contents as a BytesIO at offset 0 (the stream itself when it is one)."""
        if isinstance(self._source, str):
            return BytesIO(Path(self._source).read_bytes())
        stream = self._rewound()
        return stream if isinstance(stream, BytesIO) else BytesIO(stream.read())

    def get_bytes(self) -> bytes:
        if isinstance(self._source, str):
            return Path(self._source).read_bytes()
        return self._rewound().read()

    def save_to(self, path: str) -> str:
        """Write the file to `path` (its folder made if needed); returns `path` as a string."""
        dest = Path(path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(self._source, str):
            if Path(self._source).resolve() != dest.resolve():
                shutil.copy2(self._source, dest)
        else:
            dest.write_bytes(self._rewound().read())
        return str(dest)

    def __repr__(self) -> str:
        where = repr(self._source) if isinstance(self._source, str) else "<stream>"
        return f"File3D(source={where}, format={self._format!r})"
