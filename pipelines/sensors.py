"""Sensors (e.g. the new-checkpoint sensor that requests sweeps)."""

from __future__ import annotations

SENSORS: list = []
