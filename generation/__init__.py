"""Generation: policies and checkpoints, chat prompts, and the engines that sample from them.

Below training/ and evaluation/, which both import it and never each other for engines:
the contract (:mod:`generation.contract`), the torch, vLLM, vLLM-server, llama.cpp and speculative
engines, prompts, RoPE scaling, the terminal agent loop, policy loading and checkpoints, fast
variants, and the factory (:mod:`generation.factory`).
"""
