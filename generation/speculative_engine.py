"""Speculative decoding through transformers' assisted generation, behind the engine interface.

A drafter proposes several tokens; the target model scores them all in one forward and keeps the
longest prefix it agrees with, plus one token of its own. Under greedy decoding the result is the
target's own greedy completion (up to floating-point ties: a forward over k tokens may round a
logit differently from k one-token forwards); under sampling transformers applies the
speculative-sampling acceptance rule with a draft model's probabilities (Leviathan et al. 2023,
"Fast Inference from Transformers via Speculative Decoding", arXiv:2211.17192) and, for
prompt lookup, keeps a drafted token only when it equals the token the target sampled, so the
completions follow the target's distribution either way. Drafters:

- prompt lookup (Saxena 2023, "Prompt Lookup Decoding"): candidate tokens copied from the
  n-gram of the context that matches its end; costs nothing, helps when the answer repeats the
  prompt;
- a draft model sharing the target's vocabulary (``draft_model``).

transformers runs assisted generation one sequence at a time, so this engine decodes prompt by
prompt and sample by sample: it is a batch-1 (latency) path, and the speed bench says what that
costs at the sweep's batch size. Each sample seeds torch's global generator with its own seed, so a
sample is reproducible, though not the same draw the torch engine makes from that seed.
"""

from __future__ import annotations

import time

from generation.contract import Generation, SamplingParams, Seeds, resolve_seeds
from generation.torch_engine import completion_text, eos_token_ids
from generation.prompts import TokenizerPrompts


class SpeculativeEngine(TokenizerPrompts):
    name = "speculative"

    def __init__(self, model, tokenizer, *, draft_model=None, prompt_lookup_num_tokens: int | None = None,
                 policy_ref: str | None = None, label: str | None = None):
        if (draft_model is None) == (not prompt_lookup_num_tokens):
            raise ValueError("give exactly one drafter: a draft_model, or prompt_lookup_num_tokens > 0")
        self.model = model
        self.tokenizer = tokenizer
        self.draft_model = draft_model
        self.prompt_lookup_num_tokens = prompt_lookup_num_tokens
        self.policy_ref = policy_ref
        self.label = label or ("spec-draft" if draft_model is not None else "spec-ngram")
        self._eos = sorted(eos_token_ids(model, tokenizer))


    @property
    def identity(self) -> str:
        dtype = str(next(self.model.parameters()).dtype).removeprefix("torch.")
        return f"transformers-assisted/{dtype}/{self.label}"



    def _generate_kwargs(self, params: SamplingParams) -> dict:
        kwargs = {"max_new_tokens": params.max_new_tokens, "eos_token_id": self._eos,
                  "pad_token_id": self.tokenizer.pad_token_id}
        if params.temperature == 0:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(do_sample=True, temperature=params.temperature, top_p=params.top_p,
                          top_k=params.top_k or None)
        if self.draft_model is not None:
            kwargs["assistant_model"] = self.draft_model
        else:
            kwargs["prompt_lookup_num_tokens"] = self.prompt_lookup_num_tokens
        if params.stop:
            kwargs.update(stop_strings=list(params.stop), tokenizer=self.tokenizer)
        return kwargs

    def generate(self, prompts: list[str], params: SamplingParams, seeds: Seeds | None = None, *,
                 with_logprobs: bool = False) -> list[list[Generation]]:
        import torch

        if with_logprobs:
            raise ValueError("the speculative engine serves sweeps and serving, not GRPO rollouts: "
                             "it reports no per-token log-probs")
        if not prompts:
            return []
        prompt_ids = self.encode(prompts)
        if any(not ids for ids in prompt_ids):
            raise ValueError("an empty prompt cannot be generated from: give every prompt some text")
        seeds = resolve_seeds(seeds, params, len(prompts))
        kwargs = self._generate_kwargs(params)
        eos = set(self._eos)
        out: list[list[Generation]] = []
        self.model.eval()
        with torch.inference_mode():
            for i, ids in enumerate(prompt_ids):
                per_prompt = []
                for j in range(params.n):
                    if seeds is not None:
                        torch.manual_seed(seeds[i][j])
                    started = time.perf_counter()
                    tokens = torch.tensor([ids], dtype=torch.long)
                    generated = self.model.generate(input_ids=tokens, attention_mask=torch.ones_like(tokens),
                                                    **kwargs)[0, len(ids):].tolist()
                    stop_at = next((k for k, t in enumerate(generated) if t in eos), None)
                    # up to and including the end-of-sequence token, as the torch engine reports it
                    completion = generated if stop_at is None else generated[:stop_at + 1]
                    text = completion_text(self.tokenizer, completion, params.stop)
                    stopped = stop_at is not None or any(s in self.tokenizer.decode(completion) for s in params.stop)
                    per_prompt.append(Generation(
                        text=text, completion_tokens=len(completion), prompt_tokens=len(ids),
                        finish_reason="stop" if stopped else "length", latency_s=time.perf_counter() - started,
                        token_ids=completion))
                out.append(per_prompt)
        return out

    def close(self) -> None:
        """Nothing to free beyond the models (symmetry with the vLLM engine)."""
