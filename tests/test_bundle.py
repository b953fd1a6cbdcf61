"""The Databricks Asset Bundle is consistent with the code: every task reaches a real entry point and subcommand.

No Databricks API is called: the YAML is parsed, variables are substituted per target as the CLI would, and the
wheel tasks' parameters go through the real ``fraudlake`` argument parser.
"""

from __future__ import annotations

import copy
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipelines.base.settings import KAFKA_BOOTSTRAP_ENV, REPO_ROOT, load_settings
from pipelines.cli import build_parser

BUNDLE = REPO_ROOT / "databricks.yml"
_REFERENCE = re.compile(r"\$\{([a-zA-Z0-9_.]+)\}")
# What the Databricks CLI fills in at deploy time; any value will do for parsing.
BUILTINS = {"workspace.file_path": "/Workspace/Users/ci@example.com/.bundle/fraudlake/dev/files"}
BUILTIN_PREFIXES = ("workspace.", "bundle.")
CONTINUOUS_JOBS = {"fraudlake_engine", "fraudlake_rules_cdc"}
SCHEDULED_JOBS = {"fraudlake_data_quality", "fraudlake_maintenance"}


def load_bundle(path: Path = BUNDLE) -> dict[str, Any]:
    """databricks.yml with its ``include`` globs merged in; each job remembers the file it came from."""
    bundle: dict[str, Any] = yaml.safe_load(path.read_text())
    jobs: dict[str, Any] = {}
    for pattern in bundle.get("include", []):
        for resource_file in sorted(path.parent.glob(pattern)):
            resources = (yaml.safe_load(resource_file.read_text()) or {}).get("resources", {})
            for key, job in resources.get("jobs", {}).items():
                assert key not in jobs, f"job {key} is defined twice"
                jobs[key] = {**job, "_file": resource_file}
    bundle.setdefault("resources", {}).setdefault("jobs", {}).update(jobs)
    return bundle


def target_variables(bundle: dict[str, Any], target: str) -> dict[str, Any]:
    values = {name: spec.get("default") for name, spec in bundle.get("variables", {}).items()}
    values.update((bundle["targets"][target] or {}).get("variables", {}))
    return values


def substitute(value: Any, variables: dict[str, Any], problems: list[str], where: str) -> Any:
    """``value`` with ``${var.x}`` and the CLI's builtins replaced; unknown references are problems."""
    if isinstance(value, dict):
        return {k: substitute(v, variables, problems, where) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, variables, problems, where) for v in value]
    if not isinstance(value, str):
        return value

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name.startswith("var."):
            resolved = variables.get(name[4:])
            if resolved is None:
                problems.append(f"{where}: ${{{name}}} has no value")
                return ""
            return str(resolved)
        if name in BUILTINS:
            return BUILTINS[name]
        if name.startswith(BUILTIN_PREFIXES):
            return f"<{name}>"
        problems.append(f"{where}: unknown reference ${{{name}}}")
        return ""

    return _REFERENCE.sub(replace, value)


def tasks(bundle: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], Path]]:
    for key, job in bundle["resources"]["jobs"].items():
        for task in job.get("tasks", []):
            yield f"{key}.{task['task_key']}", task, job["_file"]


def subcommands() -> set[str]:
    parser = build_parser()
    return {name for action in parser._subparsers._group_actions for name in action.choices}


def check_bundle(bundle: dict[str, Any], pyproject: dict[str, Any]) -> list[str]:
    """What is wrong with the bundle: every problem found, sorted (empty when it is consistent)."""
    problems: list[str] = []
    scripts = pyproject["project"].get("scripts", {})
    known = subcommands()
    for target in bundle.get("targets", {}):
        variables = target_variables(bundle, target)
        for where, raw, resource_file in tasks(bundle):
            task = substitute(copy.deepcopy(raw), variables, problems, f"[{target}] {where}")
            if "python_wheel_task" in task:
                wheel = task["python_wheel_task"]
                if wheel.get("package_name") != pyproject["project"]["name"]:
                    problems.append(f"{where}: package_name {wheel.get('package_name')!r} is not the project's")
                if wheel.get("entry_point") not in scripts:
                    problems.append(f"{where}: entry_point {wheel.get('entry_point')!r} not in [project.scripts]")
                params = [str(p) for p in wheel.get("parameters", [])]
                if not params or params[0] not in known:
                    problems.append(f"{where}: {params[0] if params else '(none)'!r} is not a fraudlake subcommand")
                    continue
                try:
                    args = build_parser().parse_args(params)
                except SystemExit:
                    problems.append(f"{where}: the CLI rejects {params}")
                    continue
                if not callable(getattr(args, "handler", None)):
                    problems.append(f"{where}: {params} selects no handler")
                wheels = [lib["whl"] for lib in task.get("libraries", []) if "whl" in lib]
                if not any(resource_file.parent.joinpath(w).resolve().parent.name == "dist" for w in wheels):
                    problems.append(f"{where}: no library references the built wheel (dist/*.whl)")
            elif "notebook_task" in task:
                notebook = resource_file.parent / task["notebook_task"]["notebook_path"]
                if not notebook.is_file() and not notebook.with_suffix(".py").is_file():
                    problems.append(f"{where}: notebook {task['notebook_task']['notebook_path']} does not exist")
            else:
                problems.append(f"{where}: neither a python_wheel_task nor a notebook_task")
    return sorted(set(problems))


@pytest.fixture(scope="module")
def bundle() -> dict[str, Any]:
    return load_bundle()


@pytest.fixture(scope="module")
def pyproject() -> dict[str, Any]:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


def test_every_task_reaches_an_entry_point_and_a_real_subcommand(
    bundle: dict[str, Any], pyproject: dict[str, Any]
) -> None:
    assert check_bundle(bundle, pyproject) == []


def test_the_checker_catches_a_broken_bundle(bundle: dict[str, Any], pyproject: dict[str, Any]) -> None:
    broken = copy.deepcopy(bundle)
    jobs = broken["resources"]["jobs"]
    jobs["fraudlake_data_quality"]["tasks"][0]["python_wheel_task"]["parameters"][0] = "dqq"
    jobs["fraudlake_maintenance"]["tasks"][0]["python_wheel_task"]["entry_point"] = "fraud-lake"
    jobs["fraudlake_maintenance"]["tasks"][0]["python_wheel_task"]["parameters"].append("--no-such-flag")
    jobs["fraudlake_setup"]["tasks"][0]["notebook_task"]["notebook_path"] = "../notebooks/99_missing.py"
    jobs["fraudlake_rules_cdc"]["tasks"][0]["python_wheel_task"]["parameters"][5] = "${var.no_such_variable}"
    text = "\n".join(check_bundle(broken, pyproject))
    assert "'dqq' is not a fraudlake subcommand" in text
    assert "entry_point 'fraud-lake' not in [project.scripts]" in text
    assert "the CLI rejects" in text and "--no-such-flag" in text
    assert "notebooks/99_missing.py does not exist" in text
    assert "${var.no_such_variable} has no value" in text


def test_every_target_resolves_every_variable(bundle: dict[str, Any]) -> None:
    text = BUNDLE.read_text() + "".join(p.read_text() for p in sorted((REPO_ROOT / "resources").glob("*.yml")))
    used = {m.group(1)[4:] for m in _REFERENCE.finditer(text) if m.group(1).startswith("var.")}
    declared = set(bundle["variables"])
    assert used <= declared, f"undeclared variables {sorted(used - declared)}"
    assert set(bundle["targets"]) == {"dev", "prod"}
    assert bundle["targets"]["dev"].get("default") is True and bundle["targets"]["dev"]["mode"] == "development"
    assert bundle["targets"]["prod"]["mode"] == "production"
    for target in bundle["targets"]:
        values = target_variables(bundle, target)
        assert not [name for name in used if values.get(name) in (None, "")], target
        for name, value in (bundle["targets"][target] or {}).get("variables", {}).items():
            assert name in declared, f"target {target} sets undeclared variable {name}"
            assert value is not None


def test_continuous_and_scheduled_jobs(bundle: dict[str, Any]) -> None:
    jobs = bundle["resources"]["jobs"]
    assert CONTINUOUS_JOBS | SCHEDULED_JOBS <= set(jobs)
    for key in CONTINUOUS_JOBS:
        assert jobs[key]["continuous"] == {"pause_status": "UNPAUSED"}, key
        assert "schedule" not in jobs[key] and "trigger" not in jobs[key], key
        assert jobs[key].get("max_concurrent_runs") == 1, key
    variables = target_variables(bundle, "prod")
    for key in SCHEDULED_JOBS:
        assert "continuous" not in jobs[key], key
        schedule = substitute(jobs[key]["schedule"], variables, [], key)
        assert len(schedule["quartz_cron_expression"].split()) in (6, 7), key  # Quartz: seconds first
        assert schedule["timezone_id"] and schedule.get("pause_status") == "UNPAUSED", key


def test_the_artifact_builds_the_wheel_from_pyproject(bundle: dict[str, Any]) -> None:
    (artifact,) = bundle["artifacts"].values()
    assert artifact["type"] == "whl"
    assert (BUNDLE.parent / artifact["path"] / "pyproject.toml").is_file()
    assert "dist" in artifact["build"]


def test_kafka_bootstrap_comes_from_the_environment_the_bundle_sets(
    bundle: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = bundle["resources"]["jobs"]["fraudlake_engine"]["job_clusters"][0]["new_cluster"]
    assert engine["spark_env_vars"][KAFKA_BOOTSTRAP_ENV] == "${var.kafka_bootstrap}"
    conf = REPO_ROOT / "conf" / "databricks.yaml"
    assert load_settings(conf).kafka.bootstrap_servers == "kafka.internal.example:9093"
    monkeypatch.setenv(KAFKA_BOOTSTRAP_ENV, "broker-a:9093,broker-b:9093")
    assert load_settings(conf).kafka.bootstrap_servers == "broker-a:9093,broker-b:9093"
