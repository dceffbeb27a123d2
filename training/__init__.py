"""Training: the GRPO recipe, losses, rewards and mixture (:mod:`training.config`, :mod:`training.losses`,
:mod:`training.rewards`, :mod:`training.mixture`), learnability and training data, DeepSpeed
(:mod:`training.engine`), rollouts (:mod:`training.rollout_engine`) and the trainer
(:mod:`training.trainer`). Policies, prompts, engines and checkpoints are :mod:`generation`'s.
torch, deepspeed and transformers are imported lazily."""
