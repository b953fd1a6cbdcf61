"""Subcommands of ``fraudlake``. Each module exposes ``register(subparsers, parent)``; list it here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipelines.commands import (
    alerts_cmd,
    bench_cmd,
    chaos_cmd,
    class_archive_cmd,
    cluster_cmd,
    connect_cmd,
    console_cmd,
    demo_cmd,
    dq_cmd,
    generate_cmd,
    init_cmd,
    kafka_cmd,
    maintain_cmd,
    notebook_cmd,
    outcomes_cmd,
    rules_cmd,
    rulesdb_cmd,
    run_cmd,
    smoke_cmd,
    state_cmd,
)

Register = Callable[[Any, Any], None]

COMMANDS: list[Register] = [
    alerts_cmd.register,
    bench_cmd.register,
    chaos_cmd.register,
    class_archive_cmd.register,
    cluster_cmd.register,
    connect_cmd.register,
    console_cmd.register,
    demo_cmd.register,
    dq_cmd.register,
    generate_cmd.register,
    init_cmd.register,
    kafka_cmd.register,
    maintain_cmd.register,
    notebook_cmd.register,
    outcomes_cmd.register,
    rules_cmd.register,
    rulesdb_cmd.register,
    run_cmd.register,
    smoke_cmd.register,
    state_cmd.register,
]
