"""Subcommands of ``fraudlake``. Each module exposes ``register(subparsers, parent)``; list it here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipelines.commands import demo_cmd, init_cmd, kafka_cmd, smoke_cmd

Register = Callable[[Any, Any], None]

COMMANDS: list[Register] = [
    demo_cmd.register,
    init_cmd.register,
    kafka_cmd.register,
    smoke_cmd.register,
]
