#!/usr/bin/env python3
"""Prints one of the add-on manifests kind bakes into its node images, taken from kind's own source.

    manifests.py KIND_SOURCE_DIR CONST_NAME      e.g. defaultCNIManifest, defaultStorageManifest
    manifests.py KIND_SOURCE_DIR --images        the add-on images those manifests name, one a line

kind keeps them as Go string constants in pkg/build/nodeimage, with image names spliced in from other
constants (`... ` + kindnetdImage + ` ...`); this resolves those so the node image carries exactly
the manifests, and image tags, that this kind release expects.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

_STRING = re.compile(r'\bconst\s+(\w+)\s*=\s*"([^"]*)"')
_RAW = re.compile(r"\bconst\s+(\w+)\s*=\s*`([^`]*)`((?:\s*\+\s*\w+\s*\+\s*`[^`]*`)*)", re.S)
_PIECE = re.compile(r"\+\s*(\w+)\s*\+\s*`([^`]*)`", re.S)


def _source_text(source: Path) -> str:
    return "\n".join(p.read_text() for p in sorted((source / "pkg/build/nodeimage").glob("const*.go")))


def _string_constants(source: Path) -> dict[str, str]:
    return dict(_STRING.findall(_source_text(source)))


def manifest(source: Path, name: str) -> str:
    text = _source_text(source)
    strings = dict(_STRING.findall(text))
    for match in _RAW.finditer(text):
        if match.group(1) != name:
            continue
        out = match.group(2)
        for ref, tail in _PIECE.findall(match.group(3)):
            if ref not in strings:
                raise SystemExit(f"{name} refers to {ref}, not a string constant of kind's source")
            out += strings[ref] + tail
        return out
    raise SystemExit(f"no constant {name} in {source}/pkg/build/nodeimage")


def main() -> None:
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    source, name = Path(sys.argv[1]), sys.argv[2]
    if name == "--images":
        for const, value in sorted(_string_constants(source).items()):
            if const.endswith("Image"):
                print(value)
        return
    sys.stdout.write(manifest(source, name))


if __name__ == "__main__":
    main()
