"""Export a Llama-architecture causal LM folder (safetensors + tokenizer) to a decoder-only ONNX graph
with its KV cache as inputs and outputs, and record greedy reference tokens from transformers.

Run by path with a Python that has torch, transformers and onnx (see
``gateway.tools.modelbuild.onnx_export``);
it imports nothing from tiergate. Prints one JSON line per finished step for the caller's progress bar.

The graph (one for prefill and decode alike; batch 1 at run time, both axes dynamic):

    inputs   input_ids [batch, seq] int64,
             past_key_values.<i>.key / .value [batch, kv_heads, past, head_dim] float32 (past may be 0)
    outputs  logits [batch, 1, vocab] float32 (the last position only: prefill never needs the others),
             present.<i>.key / .value [batch, kv_heads, past + seq, head_dim]

The forward pass is written out here (RMSNorm, rotary, grouped-query attention, SwiGLU) from the model's
own modules and weights rather than traced through transformers' cache classes, whose shapes change between
releases; the reference tokens below are what keeps it honest.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
from torch import nn

REFERENCE_PROMPTS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "Count from 1 to 10, separated by commas."}],
    [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "Name three primary colours."},
    ],
]
REFERENCE_TOKENS = 24


def step(name: str, **extra: object) -> None:
    print(json.dumps({"step": name, **extra}), flush=True)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


# torch is not installed with the gateway (this script runs under another Python), so to mypy
# nn.Module is Any.
class Decoder(nn.Module):  # type: ignore[misc]
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        cfg = model.config
        self.layers = model.model.layers
        self.embed = model.model.embed_tokens
        self.norm = model.model.norm
        self.head = model.lm_head
        self.n_heads = cfg.num_attention_heads
        self.n_kv = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        rope = getattr(cfg, "rope_parameters", None) or {}
        if rope.get("rope_type", "default") != "default":
            raise ValueError(f"rope type {rope.get('rope_type')!r} is not supported by this exporter")
        theta = rope.get("rope_theta") or getattr(cfg, "rope_theta", 10000.0)
        inv = 1.0 / (theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, input_ids: torch.Tensor, *past: torch.Tensor) -> tuple[torch.Tensor, ...]:
        batch, seq = input_ids.shape[0], input_ids.shape[1]
        past_len = past[0].shape[2]
        positions = torch.arange(seq, dtype=torch.float32) + past_len
        freqs = positions[:, None] * self.inv_freq[None, :]
        angles = torch.cat((freqs, freqs), dim=-1)
        cos, sin = angles.cos()[None, None], angles.sin()[None, None]
        keys_at = torch.arange(past_len + seq, dtype=torch.float32)
        mask = torch.where(
            keys_at[None, :] <= positions[:, None],
            torch.zeros((), dtype=torch.float32),
            torch.full((), torch.finfo(torch.float32).min),
        )
        group = self.n_heads // self.n_kv
        scale = 1.0 / math.sqrt(self.head_dim)
        h = self.embed(input_ids)
        presents: list[torch.Tensor] = []
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            x = layer.input_layernorm(h)
            q = attn.q_proj(x).reshape(batch, seq, self.n_heads, self.head_dim).transpose(1, 2)
            k = attn.k_proj(x).reshape(batch, seq, self.n_kv, self.head_dim).transpose(1, 2)
            v = attn.v_proj(x).reshape(batch, seq, self.n_kv, self.head_dim).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k = torch.cat((past[2 * i], k), dim=2)
            v = torch.cat((past[2 * i + 1], v), dim=2)
            presents += [k, v]
            total = k.shape[2]
            kx = k[:, :, None].expand(batch, self.n_kv, group, total, self.head_dim)
            vx = v[:, :, None].expand(batch, self.n_kv, group, total, self.head_dim)
            kx = kx.reshape(batch, self.n_heads, total, self.head_dim)
            vx = vx.reshape(batch, self.n_heads, total, self.head_dim)
            scores = torch.matmul(q, kx.transpose(2, 3)) * scale + mask
            out = torch.matmul(torch.softmax(scores, dim=-1), vx)
            out = out.transpose(1, 2).reshape(batch, seq, self.n_heads * self.head_dim)
            h = h + attn.o_proj(out)
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        logits = self.head(self.norm(h[:, -1:, :]))
        return (logits, *presents)


def greedy(decoder: Decoder, prompt: list[int], n: int, eos: set[int]) -> list[int]:
    """Greedy tokens from the wrapper itself (the same graph the ONNX file holds)."""
    layers = len(decoder.layers)
    past = [torch.zeros(1, decoder.n_kv, 0, decoder.head_dim) for _ in range(2 * layers)]
    ids = torch.tensor([prompt])
    out: list[int] = []
    with torch.no_grad():
        for _ in range(n):
            logits, *past = decoder(ids, *past)
            token = int(logits[0, -1].argmax())
            out.append(token)
            if token in eos:
                break
            ids = torch.tensor([[token]])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, required=True, help="a transformers model folder")
    parser.add_argument("--out", type=Path, required=True, help="folder to write")
    parser.add_argument("--opset", type=int, default=17)
    args = parser.parse_args(argv)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    started = time.monotonic()
    model = AutoModelForCausalLM.from_pretrained(args.src, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(args.src)
    # The forward pass below is Llama's (no attention or MLP biases, no sliding window); anything else is
    # refused rather than exported wrong. The reference check would catch it too, after minutes of work.
    cfg = model.config
    if cfg.model_type != "llama" or getattr(cfg, "attention_bias", False) or getattr(cfg, "mlp_bias", False):
        raise SystemExit(f"{args.src}: model type {cfg.model_type!r} is not supported (Llama only)")
    decoder = Decoder(model).eval()
    step("loaded", seconds=round(time.monotonic() - started, 1))

    # Reference: transformers' own greedy generate (not the wrapper), then the wrapper must agree.
    eos_ids = model.generation_config.eos_token_id
    eos = set(eos_ids if isinstance(eos_ids, list) else [eos_ids])
    references = []
    for messages in REFERENCE_PROMPTS:
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if hasattr(prompt, "keys"):  # transformers 5 may return a BatchEncoding
            prompt = prompt["input_ids"]
        prompt = [int(t) for t in prompt]
        with torch.no_grad():
            made = model.generate(
                torch.tensor([prompt]), max_new_tokens=REFERENCE_TOKENS, do_sample=False, num_beams=1
            )
        expected = [int(t) for t in made[0, len(prompt) :]]
        mine = greedy(decoder, prompt, REFERENCE_TOKENS, eos)
        if mine != expected[: len(mine)]:
            raise SystemExit(f"the export wrapper disagrees with transformers:\n{mine}\n{expected}")
        references.append({"messages": messages, "prompt_ids": prompt, "greedy_ids": expected})
    step("reference", prompts=len(references))

    layers = len(decoder.layers)
    names_in = ["input_ids"]
    names_out = ["logits"]
    axes: dict[str, dict[int, str]] = {"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch"}}
    for i in range(layers):
        for kind in ("key", "value"):
            names_in.append(f"past_key_values.{i}.{kind}")
            names_out.append(f"present.{i}.{kind}")
            axes[names_in[-1]] = {0: "batch", 2: "past"}
            axes[names_out[-1]] = {0: "batch", 2: "total"}
    dummy_ids = torch.tensor([[1, 2, 3, 4]])
    dummy_past = [torch.zeros(1, decoder.n_kv, 3, decoder.head_dim) for _ in range(2 * layers)]
    args.out.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(
            decoder,
            (dummy_ids, *dummy_past),
            str(args.out / "model.onnx"),
            input_names=names_in,
            output_names=names_out,
            dynamic_axes=axes,
            opset_version=args.opset,
            do_constant_folding=True,
            dynamo=False,
        )
    step("exported", seconds=round(time.monotonic() - started, 1))

    (args.out / "reference.json").write_text(
        json.dumps({"source": "transformers greedy generate, float32", "prompts": references}) + "\n"
    )
    meta = {
        "layers": layers,
        "kv_heads": decoder.n_kv,
        "head_dim": decoder.head_dim,
        "vocab_size": model.config.vocab_size,
        "context_length": model.config.max_position_embeddings,
        "bos_token": tokenizer.bos_token,
        "eos_token": tokenizer.eos_token,
        "eos_token_ids": sorted(eos),
    }
    (args.out / "decoder.json").write_text(json.dumps(meta, indent=2) + "\n")
    step("done", seconds=round(time.monotonic() - started, 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
