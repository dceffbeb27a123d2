"""Domains: the contract (:class:`Domain`), the registry and the built-in domains.

Plugins import the contract as ``from domains import Domain``.
"""

from domains.base import Domain, DomainError, LearnedReward, NoVerifierError, SAFETY_POLICIES, SPLITS, ScoringError
from domains.registry import PluginError, Registry, UnknownDomainError, get_registry, load_registry

__all__ = [
    "Domain",
    "DomainError",
    "LearnedReward",
    "NoVerifierError",
    "PluginError",
    "Registry",
    "SAFETY_POLICIES",
    "SPLITS",
    "ScoringError",
    "UnknownDomainError",
    "get_registry",
    "load_registry",
]
