"""The tiny checkpoint in Cosmos3-Edge's layout, for build_tiny_checkpoint.py --layout cosmos3_edge.

vLLM (0.32, vllm/model_executor/models/cosmos3_edge.py) serves it as Cosmos3EdgeForConditionalGeneration:
- config.json: model_type `cosmos3_edge` (vLLM's own Cosmos3EdgeConfig): a Nemotron-H text model of attention
  (`*`) and MLP (`-`) layers only, one pair per block, interleaved M-RoPE; a SigLIP2 vision tower; a projector
  that merges 2x2 patches into the text model's width;
- weights as the unified Diffusers checkpoint stores them: the text model in transformer/ (block N's attention
  and MLP in `layers.N`, which vLLM splits into Nemotron-H layers 2N and 2N+1), the vision tower and projector
  in vision_encoder/ (`model.visual.*`, `model.projector.*`);
- processor configs naming vLLM's Cosmos3EdgeProcessor (SigLIP2 patches, no temporal patching);
- a chat template that thinks by default: its generation prompt opens `<think>` unless `enable_thinking` is
  false (then an empty think block), as Edge's template does.
Runs with the vllm environment's python (vllm, torch, transformers).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import build_tiny_checkpoint as builder  # beside this script; what the two layouts share
import torch
from safetensors.torch import save_file
from transformers import PreTrainedTokenizerBase

SEED = 0
HIDDEN = 128
BLOCKS = 2
HEADS, KV_HEADS, HEAD_DIM = 4, 2, 64
VISION_HIDDEN = 64
PATCH = 16

GENERATION_PROMPT = r"""{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\n' -}}
{%- if enable_thinking is defined and enable_thinking is false -%}
{{- '<think>\n\n</think>\n\n' -}}
{%- else -%}
{{- '<think>\n' -}}
{%- endif -%}
{%- endif -%}"""


def edge_chat_template(qwen_template: str) -> str:
    """The Qwen3-VL template with Edge's generation prompt: thinking unless enable_thinking is false."""
    head, sep, _ = qwen_template.partition("{%- if add_generation_prompt -%}")
    if not sep:
        raise SystemExit("the Qwen3-VL template has no generation prompt")
    return head + GENERATION_PROMPT


def _config(vocab: int, ids: dict[str, int]) -> Any:
    from vllm.transformers_utils.configs.cosmos3_edge import Cosmos3EdgeConfig

    config = Cosmos3EdgeConfig(
        text_config={
            "vocab_size": vocab,
            "hidden_size": HIDDEN,
            "intermediate_size": 256,
            "num_hidden_layers": BLOCKS,
            "num_attention_heads": HEADS,
            "num_key_value_heads": KV_HEADS,
            "head_dim": HEAD_DIM,
            "hidden_act": "relu2",
            "rms_norm_eps": 1e-5,
            "max_position_embeddings": 32768,
            "rope_parameters": builder.MROPE,
            **builder.text_token_ids(ids),
            "tie_word_embeddings": False,
        },
        vision_config={
            "hidden_size": VISION_HIDDEN,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_channels": 3,
            "patch_size": PATCH,
            "num_patches": 256,
            "hidden_act": "gelu_pytorch_tanh",
            "layer_norm_eps": 1e-6,
        },
        projector_config={
            "input_hidden_size": VISION_HIDDEN,
            "spatial_merge_size": 2,
            "merger_intermediate_size": 256,
            "out_hidden_size": HIDDEN,
        },
        **builder.vision_token_ids(ids),
        tie_word_embeddings=False,
    )
    config.architectures = ["Cosmos3EdgeForConditionalGeneration"]
    config.dtype = "bfloat16"
    return config


def _portable_text_config(path: Path) -> None:
    """config.json as every vLLM release with Cosmos3-Edge reads it: the text config's block types left to
    num_hidden_layers (attention + MLP per block). vLLM 0.32's config writes `layers_block_type`; in 0.26's
    (on the GPU check's machine) it is a read-only property, and loading the file failed: "property
    'layers_block_type' of 'Cosmos3EdgeTextConfig' object has no setter"."""
    data = json.loads(path.read_text())
    for key in ("layers_block_type", "mtp_layers_block_type"):
        data["text_config"].pop(key, None)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _text_weights(vocab: int, end_id: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * 0.02

    dim = HIDDEN - 1
    weights: dict[str, torch.Tensor] = {
        "embed_tokens.weight": rand(vocab, HIDDEN),
        "norm.weight": torch.ones(HIDDEN),
    }
    weights["embed_tokens.weight"][:, dim] = torch.rand(vocab, generator=gen) * builder.END_FEATURE_MAX
    for n in range(BLOCKS):
        block = {
            "input_layernorm.weight": torch.ones(HIDDEN),
            "self_attn.to_q.weight": rand(HEADS * HEAD_DIM, HIDDEN),
            "self_attn.to_k.weight": rand(KV_HEADS * HEAD_DIM, HIDDEN),
            "self_attn.to_v.weight": rand(KV_HEADS * HEAD_DIM, HIDDEN),
            "self_attn.to_out.weight": rand(HIDDEN, HEADS * HEAD_DIM),
            "post_attention_layernorm.weight": torch.ones(HIDDEN),
            "mlp.up_proj.weight": rand(256, HIDDEN),
            "mlp.down_proj.weight": rand(HIDDEN, 256),
            # Generation-tower tensors of a real unified checkpoint: the reasoner's loader drops them.
            "mlp_moe_gen.gate_proj.weight": rand(256, HIDDEN),
            "self_attn.add_q_proj.weight": rand(HIDDEN, HIDDEN),
        }
        # Nothing writes to the feature dimension after the embedding (see build_tiny_checkpoint.py).
        block["self_attn.to_out.weight"][dim, :] = 0
        block["mlp.down_proj.weight"][dim, :] = 0
        weights.update({f"layers.{n}.{k}": v for k, v in block.items()})
    head = rand(vocab, HIDDEN)
    head[:, dim] = 0
    head[end_id, dim] = builder.END_LOGIT_WEIGHT
    weights["lm_head.weight"] = head
    weights["proj_in.weight"] = rand(HIDDEN, 16)
    return weights


def _vision_weights(gen: torch.Generator) -> dict[str, torch.Tensor]:
    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * 0.02

    v, mlp = VISION_HIDDEN, 128
    weights = {
        "model.visual.embeddings.patch_embedding.weight": rand(v, 3 * PATCH * PATCH),
        "model.visual.embeddings.patch_embedding.bias": torch.zeros(v),
        "model.visual.embeddings.position_embedding.weight": rand(256, v),
        "model.visual.post_layernorm.weight": torch.ones(v),
        "model.visual.post_layernorm.bias": torch.zeros(v),
        "model.projector.norm.weight": torch.ones(v),
        "model.projector.norm.bias": torch.zeros(v),
        "model.projector.linear_fc1.weight": rand(256, 4 * v),
        "model.projector.linear_fc1.bias": torch.zeros(256),
        "model.projector.linear_fc2.weight": rand(HIDDEN, 256),
        "model.projector.linear_fc2.bias": torch.zeros(HIDDEN),
    }
    for n in range(2):
        layer = f"model.visual.encoder.layers.{n}"
        for name, shape in (
            ("self_attn.q_proj", (v, v)),
            ("self_attn.k_proj", (v, v)),
            ("self_attn.v_proj", (v, v)),
            ("self_attn.out_proj", (v, v)),
            ("mlp.fc1", (mlp, v)),
            ("mlp.fc2", (v, mlp)),
        ):
            weights[f"{layer}.{name}.weight"] = rand(*shape)
            weights[f"{layer}.{name}.bias"] = torch.zeros(shape[0])
        for norm in ("layer_norm1", "layer_norm2"):
            weights[f"{layer}.{norm}.weight"] = torch.ones(v)
            weights[f"{layer}.{norm}.bias"] = torch.zeros(v)
    return weights


def _save(tensors: dict[str, torch.Tensor], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(
        {k: t.to(torch.bfloat16).contiguous() for k, t in tensors.items()}, path, metadata={"format": "pt"}
    )


def _processors(out: Path, tok: PreTrainedTokenizerBase, template: str) -> None:
    from vllm.transformers_utils.processors.cosmos3_edge import (
        Cosmos3EdgeImageProcessor,
        Cosmos3EdgeProcessor,
        Cosmos3EdgeVideoProcessor,
    )

    image = Cosmos3EdgeImageProcessor(
        size=builder.IMAGE_SIZE, patch_size=PATCH, merge_size=2, max_num_patches=2048, **builder.PIXEL_NORM
    )
    video = Cosmos3EdgeVideoProcessor(
        patch_size=PATCH, temporal_patch_size=1, merge_size=2, **builder.VIDEO_SAMPLING, **builder.PIXEL_NORM
    )
    Cosmos3EdgeProcessor(
        image_processor=image, tokenizer=tok, video_processor=video, chat_template=template
    ).save_pretrained(out)
    # The per-processor files real checkpoints ship as well.
    image.save_pretrained(out)
    video.save_pretrained(out)
    for name, kind in (("preprocessor_config.json", "image"), ("video_preprocessor_config.json", "video")):
        path = out / name
        data = json.loads(path.read_text()) if path.exists() else {}
        data["processor_class"] = "Cosmos3EdgeProcessor"
        data[f"{kind}_processor_type"] = f"Cosmos3Edge{kind.capitalize()}Processor"
        path.write_text(json.dumps(data, indent=2))


def build_edge(out: Path, tok: PreTrainedTokenizerBase, tokens: list[str]) -> None:
    """Write the Edge-layout checkpoint into `out` (an empty directory); `tok` is the trained tokenizer."""
    torch.manual_seed(SEED)
    ids = {t: tok.convert_tokens_to_ids(t) for t in tokens}
    vocab = (len(tok) + 127) // 128 * 128
    template = edge_chat_template(str(tok.chat_template))
    tok.chat_template = template
    _config(vocab, ids).save_pretrained(out)
    _portable_text_config(out / "config.json")
    gen = torch.Generator().manual_seed(SEED + 3)
    _save(
        _text_weights(vocab, ids["<|im_end|>"], gen),
        out / "transformer" / "diffusion_pytorch_model.safetensors",
    )
    _save(_vision_weights(gen), out / "vision_encoder" / "diffusion_pytorch_model.safetensors")
    builder.generation_config(ids).save_pretrained(out)
    tok.save_pretrained(out)
    _processors(out, tok, template)
