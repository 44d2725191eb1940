"""The flag table (server/versions.py): the releases it covers and the row each vLLM version gets."""

from __future__ import annotations

import pytest

from cosmos_reasoner_ros.server import versions


def test_the_table_covers_the_supported_releases() -> None:
    for release in ("0.19.1", "0.21.0", "0.23.0", "0.24.0", "0.25.1", "0.26.0", "cpu-0.32.0", "0.33.0"):
        assert release in versions.RELEASES, release
    # What the wheels showed: the trust flag exists from 0.31.0 on (and the gate it opens came with it), the
    # native Cosmos3 architecture from 0.23.0 on; qwen3 is a reasoning parser everywhere.
    for release, info in versions.RELEASES.items():
        minor = versions.sort_key(release)[:3]
        assert ("--trust-request-mm-kwargs" in info.flags) == (minor >= (0, 31, 0)), release
        assert ("Cosmos3ForConditionalGeneration" in info.architectures) == (minor >= (0, 23, 0)), release
        assert "qwen3" in info.reasoning_parsers and "VLLM_API_KEY" in info.env
        assert info.flags <= versions.KNOWN_FLAGS


@pytest.mark.parametrize(
    ("version", "release", "exact"),
    [
        ("0.26.0", "0.26.0", True),
        ("0.32.0+cpu", "cpu-0.32.0", True),
        ("0.31.0+cpu", "0.31.0", False),  # a CPU build without a row of its own: its GPU release
        ("0.27.0", "0.27.1", False),  # same minor version
        ("0.25.2", "0.25.1", False),
        ("0.23.0.post1", "0.23.0", True),
        ("0.36.1", "0.34.0", False),  # newer than the table: the newest row
    ],
)
def test_versions_map_to_table_rows(version: str, release: str, exact: bool) -> None:
    row = versions.row_for(version)
    assert (row.release, row.exact) == (release, exact)
    assert bool(row.note) != exact
