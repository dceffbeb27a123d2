"""Training: policies (:mod:`training.policy`), chat prompts (:mod:`training.prompts`), generation
engines (:mod:`training.generation`, :mod:`training.vllm_engine`), the GRPO recipe, losses, rewards
and mixture (:mod:`training.config`, :mod:`training.losses`, :mod:`training.rewards`,
:mod:`training.mixture`), DeepSpeed (:mod:`training.engine`), the trainer (:mod:`training.trainer`)
and checkpoints (:mod:`training.checkpoints`). torch, deepspeed and transformers are imported lazily."""
