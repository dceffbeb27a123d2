"""Schedules (e.g. the nightly sweep of champion and latest checkpoint at 02:00 UTC)."""

from __future__ import annotations

SCHEDULES: list = []
