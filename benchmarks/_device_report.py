"""The device check's report: pytest's JUnit XML summarized, and the results as markdown."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
from typing import Any

_MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")


def summarize_junit(xml_text: str) -> dict[str, Any]:
    """Counts and details of a pytest run from its JUnit XML report.

    Args:
        xml_text: the report ``pytest --junitxml`` wrote.

    Returns:
        Counts of passed, failed (errors included) and skipped tests; a failing test's
        last error line; skip reasons; and, as ``not_run``, every test module that
        could not be collected because a module it imports is missing.
    """
    counts = {"passed": 0, "failed": 0, "skipped": 0, "not_run_modules": 0}
    failures, skips, not_run = [], [], []
    for case in ElementTree.fromstring(xml_text).iter("testcase"):
        name = "::".join(part for part in (case.get("classname"), case.get("name")) if part)
        problem = next(
            (case.find(tag) for tag in ("failure", "error") if case.find(tag) is not None), None
        )
        skip = case.find("skipped")
        if problem is not None:
            text = problem.text or ""
            missing = _MISSING_MODULE.search(text)
            if problem.get("message") == "collection failure" and missing:
                counts["not_run_modules"] += 1
                not_run.append({"module": name, "missing": missing.group(1)})
                continue
            counts["failed"] += 1
            detail = problem.get("message") or ""
            if detail in ("", "collection failure"):  # the reason is in the traceback's E lines
                raised = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
                detail = raised[-1] if raised else text.strip()[-300:]
            detail = " ".join(detail.split())[:300]
            lacks = _MISSING_MODULE.search(detail)
            failures.append({"test": name, "message": detail, "missing": lacks and lacks[1]})
        elif skip is not None:
            counts["skipped"] += 1
            skips.append({"test": name, "reason": (skip.get("message") or "")[:300]})
        else:
            counts["passed"] += 1
    return {"counts": counts, "failures": failures, "skips": skips, "not_run": not_run}


def _failed_step(step: dict[str, Any]) -> list[str]:
    tail = step.get("output_tail", "").strip()[-1500:]
    return [f"This step gave {step['error']}. The end of its output:", "", "```", tail, "```"]


def _placement_lines(step: dict[str, Any]) -> list[str]:
    if "error" in step:
        return _failed_step(step)
    batch, device = step["batch"], step["device"]
    lines = [
        f"A uint8 batch of shape {tuple(batch['shape'])} ({batch['bytes'] / 1e6:.3g} MB) onto "
        f"`{device['repr']}` ({device['kind']}); medians of {step['rounds']} interleaved rounds, "
        "each call timed until its copy had finished.",
        "",
        "| candidate | median ms | GB/s |",
        "| --- | --- | --- |",
    ]
    for name, ms in step["median_ms"].items():
        lines.append(f"| {name} | {ms:.3g} | {step['gb_per_s'][name]:.3g} |")
    lines += ["", "| ratio (median of per-round ratios) | value |", "| --- | --- |"]
    lines += [f"| {name} | {value:.3f} |" for name, value in step["ratios"].items()]
    if step["not_available"]:
        lines += ["", "Not measured:", ""]
        lines += [f"- {sentence}." for sentence in step["not_available"]]
    return lines


def _setup_devices_lines(step: dict[str, Any]) -> list[str]:
    if "error" in step:
        return _failed_step(step)
    return [
        f"Plan: platform `{step['platform']}`, {step['num_devices']} devices. Its message: "
        f'"{step["message"]}" JAX then ran on `{step["jax_backend"]}` with '
        f"{step['jax_device_count']} devices."
    ]


def _tests_lines(step: dict[str, Any]) -> list[str]:
    lines = [f"`{step['command']}` ({step['seconds']:.0f} s): {step['summary']}"]
    if step["timed_out"]:
        lines.append("\nThe run was stopped at its time limit; counts below cover what finished.")
    if "counts" not in step:
        return [*lines, "", "No JUnit report was written.", "", "```", step["output_tail"], "```"]
    counts = step["counts"]
    lines.append(
        f"\n{counts['passed']} passed, {counts['failed']} failed or errored, "
        f"{counts['skipped']} skipped; test modules not run: {counts['not_run_modules']}."
    )
    if step["not_run"]:
        lines += ["", "Not run, because a module they import is missing here (pytest's summary"]
        lines += ["counts each test file among these twice, as tests and as doctests):", ""]
        lines += [
            f"- `{item['module']}`: no module `{item['missing']}`" for item in step["not_run"]
        ]
    lacking = sorted({item["missing"] for item in step["failures"] if item["missing"]})
    if lacking:
        lines += ["", f"Some failed because a module is missing here: {', '.join(lacking)}."]
    if step["failures"]:
        lines += ["", "Failed:", ""]
        lines += [f"- `{item['test']}`: {item['message']}" for item in step["failures"]]
    reasons = sorted({item["reason"] for item in step["skips"]})
    if reasons:
        lines += ["", "Skip reasons:", ""] + [f"- {reason}" for reason in reasons]
    return lines


def markdown(results: dict[str, Any]) -> str:
    """The report as a short markdown page, from whatever steps have finished."""
    machine = results["machine"]
    versions = ", ".join(
        f"{name} {version or 'not installed'}" for name, version in machine["versions"].items()
    )
    lines = [
        "## Device check results",
        "",
        f"`make device-check`, {machine['started_utc']} UTC: Python {machine['python']}, "
        f"{machine['cpu_cores']} CPU cores; {versions}.",
    ]
    sections = (
        ("placement", "Placing one batch on one device", _placement_lines),
        ("setup_devices", "`setup_devices(8)` on this runtime", _setup_devices_lines),
        ("unit_tests", "Unit tests on 8 simulated CPU devices", _tests_lines),
    )
    for key, title, render in sections:
        if key in results:
            lines += ["", f"### {title}", "", *render(results[key])]
    return "\n".join(lines) + "\n"
