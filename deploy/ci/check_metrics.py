#!/usr/bin/env python3
"""Checks that the Grafana dashboard and the alert rules query only metrics
the README's "Monitoring" table documents (run by deploy/ci/run).

The black-box test tests/it/monitoring.rs checks the other direction: every
metric the real processes expose is in that table.
"""

import argparse
import json
import re
import sys
from pathlib import Path

import yaml

SUFFIXES = ("_bucket", "_count", "_sum")


def readme_metrics(readme: Path) -> set[str]:
    text = readme.read_text(encoding="utf-8")
    section = text.split("## Monitoring", 1)[1].split("\n## ", 1)[0]
    names = set(re.findall(r"^\| `(qiwu_[a-z0-9_]+)`", section, flags=re.M))
    if "qiwu_fires_total" not in names:
        sys.exit("check_metrics: cannot find the README's metrics table")
    return names


def known(name: str, documented: set[str]) -> bool:
    if name in documented:
        return True
    return any(name.endswith(s) and name[: -len(s)] in documented for s in SUFFIXES)


def exprs_of_dashboard(path: Path) -> list[str]:
    dashboard = json.loads(path.read_text(encoding="utf-8"))
    if not dashboard.get("panels"):
        sys.exit(f"check_metrics: {path} has no panels")
    out = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            out.append(target["expr"])
    return out


def exprs_of_rules(path: Path) -> list[str]:
    rules = yaml.safe_load(path.read_text(encoding="utf-8"))
    return [r["expr"] for g in rules["groups"] for r in g["rules"]]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", type=Path, required=True)
    root = parser.parse_args().root
    documented = readme_metrics(root / "README.md")
    problems = []
    sources = {
        "deploy/grafana/qiwu-scheduler.json": exprs_of_dashboard(
            root / "deploy/grafana/qiwu-scheduler.json"
        ),
        "deploy/prometheus/alerts.yml": exprs_of_rules(root / "deploy/prometheus/alerts.yml"),
    }
    for source, exprs in sources.items():
        for expr in exprs:
            for name in re.findall(r"qiwu_[a-z0-9_]+", expr):
                if not known(name, documented):
                    problems.append(f"{source}: {name} is not in the README's metrics table")
    if problems:
        print("\n".join(sorted(set(problems))), file=sys.stderr)
        sys.exit(1)
    print(f"check_metrics: {sum(map(len, sources.values()))} queries use documented metrics")


if __name__ == "__main__":
    main()
