"""Export a sentence-transformers BERT model (all-MiniLM-L6-v2) to one ONNX graph that returns sentence
embeddings, and record reference embeddings computed by transformers.

Run by path with a Python that has torch, transformers and onnx (see
``gateway.tools.modelbuild.embed_export``); it imports nothing from tiergate. Prints one JSON line per
finished step.

The graph (both axes dynamic):

    inputs   input_ids [batch, seq] int64, attention_mask [batch, seq] int64 (1: a token, 0: padding)
    outputs  embedding [batch, hidden] float32: the mean of the last hidden states over the real tokens,
             L2-normalised (sentence-transformers' Pooling(mean) + Normalize modules)

The reference is computed the way sentence-transformers does it (its tokenizer call truncates at the model's
``max_seq_length``; BertModel; mean pooling over the attention mask; normalise), by transformers itself and
not by the exported wrapper, so the gateway-side check compares the ONNX graph with the original model.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from torch import nn

REFERENCE_TEXTS = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The new movie is awesome!",
    "The cat sits outside on the mat, watching the birds in the garden.",
    "Quantum chromodynamics describes the strong interaction between quarks and gluons.",
    "hello",
]


def step(name: str, **extra: object) -> None:
    print(json.dumps({"step": name, **extra}), flush=True)


def mean_pooled(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    summed = (hidden * weights).sum(dim=1)
    counts = weights.sum(dim=1).clamp(min=1e-9)
    return torch.nn.functional.normalize(summed / counts, p=2.0, dim=1)


# torch is not installed with the gateway (this script runs under another Python), so to mypy
# nn.Module is Any.
class SentenceEncoder(nn.Module):  # type: ignore[misc]
    def __init__(self, bert: nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        token_types = torch.zeros_like(input_ids)
        out = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_types)
        return mean_pooled(out.last_hidden_state, attention_mask)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, required=True, help="a sentence-transformers model folder")
    parser.add_argument("--out", type=Path, required=True, help="folder to write")
    parser.add_argument("--opset", type=int, default=17)
    args = parser.parse_args(argv)

    from transformers import AutoModel, AutoTokenizer

    started = time.monotonic()
    # Eager attention: the traced graph takes the padding mask as a plain additive mask.
    bert = AutoModel.from_pretrained(args.src, dtype=torch.float32, attn_implementation="eager").eval()
    if bert.config.model_type != "bert":
        raise SystemExit(f"{args.src}: model type {bert.config.model_type!r} is not supported (BERT only)")
    tokenizer = AutoTokenizer.from_pretrained(args.src)
    st_config = json.loads((args.src / "sentence_bert_config.json").read_text())
    max_seq = int(st_config.get("max_seq_length", 256))
    step("loaded", seconds=round(time.monotonic() - started, 1))

    batch = tokenizer(REFERENCE_TEXTS, padding=True, truncation=True, max_length=max_seq, return_tensors="pt")
    with torch.no_grad():
        hidden = bert(**batch).last_hidden_state
        expected = mean_pooled(hidden, batch["attention_mask"])
    ids = [
        [int(t) for t, m in zip(row, mask, strict=True) if m]
        for row, mask in zip(batch["input_ids"].tolist(), batch["attention_mask"].tolist(), strict=True)
    ]
    references = [
        {"text": text, "ids": row, "embedding": [float(x) for x in vec]}
        for text, row, vec in zip(REFERENCE_TEXTS, ids, expected.tolist(), strict=True)
    ]
    step("reference", texts=len(references))

    encoder = SentenceEncoder(bert).eval()
    dummy = tokenizer(["a dummy input", "another one, longer than that"], padding=True, return_tensors="pt")
    args.out.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(
            encoder,
            (dummy["input_ids"], dummy["attention_mask"]),
            str(args.out / "model.onnx"),
            input_names=["input_ids", "attention_mask"],
            output_names=["embedding"],
            dynamic_axes={
                "input_ids": {0: "batch", 1: "seq"},
                "attention_mask": {0: "batch", 1: "seq"},
                "embedding": {0: "batch"},
            },
            opset_version=args.opset,
            do_constant_folding=True,
            dynamo=False,
        )
    step("exported", seconds=round(time.monotonic() - started, 1))
    (args.out / "reference.json").write_text(
        json.dumps({"source": "transformers BertModel + mean pooling + L2, float32", "texts": references})
        + "\n"
    )
    meta = {
        "dimensions": int(bert.config.hidden_size),
        "max_tokens": max_seq,
        "vocab_size": int(bert.config.vocab_size),
        "pad_token_id": int(tokenizer.pad_token_id),
        "pooling": "mean",
        "normalized": True,
    }
    (args.out / "embedding.json").write_text(json.dumps(meta, indent=2) + "\n")
    step("done", seconds=round(time.monotonic() - started, 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
