#!/usr/bin/env python3
"""Checks the deployment files against the README and the real binary.

Run by deploy/ci/run (itself run by .ci/run) after the overlays were rendered
with `kubectl kustomize`. Schema validation is done by kubernetes-validate and
check-jsonschema; this script checks what no schema knows:

* every environment variable the manifests and the Compose file give a
  qiwu-scheduler container is a name of the README's configuration table;
* api and worker containers get the database, Redis, JWT and zone settings,
  and QIWU_INSTANCE_ID from the pod's name;
* probes: startup, liveness /healthz and readiness /readyz on the container
  port that QIWU_LISTEN names, with a grace period longer than the 10 s
  handler grace; Prometheus annotations on the same port and path; the
  PodMonitor's port exists; the containers' securityContext is locked down;
* the Prometheus scrape targets are the Compose services and port;
* the real binary, started as `api` and `worker` with the rendered ConfigMap
  (on a free port and a fresh PostgreSQL database), answers 200 on every
  probe and scrape path the manifests use, and `healthcheck --ready` (the
  Compose health check) passes against it.
"""

import argparse
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

# The handler grace of SPEC §5 (src/run.rs SHUTDOWN_GRACE) and the margin the
# process adds before it exits.
HANDLER_GRACE_S = 10
EXIT_MARGIN_S = 1
# Variables every api and worker needs in a cluster.
REQUIRED = {
    "api": {"QIWU_LISTEN", "QIWU_DATABASE_URL", "QIWU_REDIS_URL", "QIWU_JWT_SECRET",
            "QIWU_TIMEZONE", "QIWU_INSTANCE_ID"},
    "worker": {"QIWU_LISTEN", "QIWU_DATABASE_URL", "QIWU_REDIS_URL", "QIWU_JWT_SECRET",
               "QIWU_TIMEZONE", "QIWU_INSTANCE_ID", "QIWU_WEBHOOK_SECRET"},
    "migrate": {"QIWU_DATABASE_URL"},
}
ROLES = {"api", "worker", "migrate"}

problems: list[str] = []


def problem(text: str) -> None:
    problems.append(text)


def readme_variables(readme: Path) -> set[str]:
    """The variable names of the README's configuration table."""
    text = readme.read_text(encoding="utf-8")
    section = text.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    names = set(re.findall(r"^\| `([A-Z][A-Z0-9_]*)` \|", section, flags=re.M))
    if "QIWU_DATABASE_URL" not in names:
        sys.exit("check_deploy: cannot find the README's configuration table")
    return names


def load_rendered(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def listen_port(value: str) -> int:
    return int(value.rsplit(":", 1)[1])


def pod_spec(obj: dict) -> dict | None:
    if obj["kind"] in ("Deployment", "Job", "StatefulSet", "DaemonSet"):
        return obj["spec"]["template"]["spec"]
    return None


def check_security(where: str, pod: dict, container: dict) -> None:
    pod_sc = pod.get("securityContext", {})
    sc = container.get("securityContext", {})
    if not (sc.get("runAsNonRoot") or pod_sc.get("runAsNonRoot")):
        problem(f"{where}: runAsNonRoot is not set")
    if sc.get("readOnlyRootFilesystem") is not True:
        problem(f"{where}: the root filesystem is not read-only")
    if sc.get("allowPrivilegeEscalation") is not False:
        problem(f"{where}: allowPrivilegeEscalation is not false")
    if sc.get("privileged"):
        problem(f"{where}: privileged")
    if "ALL" not in sc.get("capabilities", {}).get("drop", []):
        problem(f"{where}: capabilities are not all dropped")
    if pod.get("automountServiceAccountToken") is not False:
        problem(f"{where}: the service account token is mounted")


def check_overlay(name: str, docs: list[dict], readme_names: set[str]) -> dict:
    """Checks one rendered overlay; returns per role the probe and scrape
    paths and the rendered ConfigMap values, for the live check."""
    config_maps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
    secret_maps = {d["metadata"]["name"]: {**d.get("data", {}), **d.get("stringData", {})}
                   for d in docs if d["kind"] == "Secret"}
    seen_roles: dict[str, dict] = {}
    for obj in docs:
        pod = pod_spec(obj)
        if pod is None:
            continue
        role = obj["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component")
        if role not in ROLES:
            problem(f"{name}: {obj['kind']} {obj['metadata']['name']} has no known component label")
            continue
        for container in pod["containers"]:
            where = f"{name}: {obj['kind']}/{obj['metadata']['name']} container {container['name']}"
            env: dict[str, object] = {}
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    ref = source["configMapRef"]["name"]
                    if ref not in config_maps:
                        problem(f"{where}: envFrom names ConfigMap {ref}, which is not rendered")
                    env.update(config_maps.get(ref, {}))
                if "secretRef" in source:
                    ref = source["secretRef"]["name"]
                    if ref not in secret_maps:
                        problem(f"{where}: envFrom names Secret {ref}, which is not rendered")
                    env.update({k: "(secret)" for k in secret_maps.get(ref, {})})
            for var in container.get("env", []):
                env[var["name"]] = var.get("value", var.get("valueFrom"))
            for var in sorted(env):
                if var not in readme_names:
                    problem(f"{where}: {var} is not a variable of the README's configuration table")
            for var in sorted(REQUIRED[role] - set(env)):
                problem(f"{where}: {var} is not set")
            instance = env.get("QIWU_INSTANCE_ID")
            if role in ("api", "worker") and not (
                isinstance(instance, dict)
                and instance.get("fieldRef", {}).get("fieldPath") == "metadata.name"
            ):
                problem(f"{where}: QIWU_INSTANCE_ID does not come from the pod's name")
            check_security(where, pod, container)
            if role == "migrate":
                if container.get("args") != ["migrate"]:
                    problem(f"{where}: the Job does not run `migrate`")
                continue
            if container.get("args") != [role]:
                problem(f"{where}: runs {container.get('args')}, not [{role!r}]")
            port = listen_port(str(env.get("QIWU_LISTEN", ":0")))
            ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
            if port not in ports.values():
                problem(f"{where}: no containerPort {port} (the port of QIWU_LISTEN)")

            def probe(kind: str, want_path: str | None) -> str | None:
                spec = container.get(kind)
                if not spec or "httpGet" not in spec:
                    problem(f"{where}: no HTTP {kind}")
                    return None
                get = spec["httpGet"]
                target = ports.get(get["port"], get["port"])
                if target != port:
                    problem(f"{where}: {kind} uses port {get['port']}, not {port} of QIWU_LISTEN")
                if want_path and get["path"] != want_path:
                    problem(f"{where}: {kind} asks {get['path']}, not {want_path}")
                return get["path"]

            paths = {probe("startupProbe", None), probe("livenessProbe", "/healthz"),
                     probe("readinessProbe", "/readyz")}
            pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
            grace = pod.get("terminationGracePeriodSeconds", 30)
            if grace <= pre_stop + HANDLER_GRACE_S + EXIT_MARGIN_S:
                problem(f"{where}: terminationGracePeriodSeconds {grace} is not longer than "
                        f"preStop {pre_stop} s + the {HANDLER_GRACE_S} s handler grace + {EXIT_MARGIN_S} s")
            annotations = obj["spec"]["template"]["metadata"].get("annotations", {})
            if annotations.get("prometheus.io/scrape") != "true":
                problem(f"{where}: no prometheus.io/scrape annotation")
            if annotations.get("prometheus.io/port") != str(port):
                problem(f"{where}: prometheus.io/port is not {port}")
            metrics = annotations.get("prometheus.io/path", "/metrics")
            resources = container.get("resources", {})
            if not resources.get("requests") or not resources.get("limits"):
                problem(f"{where}: resources need requests and limits")
            seen_roles[role] = {
                "paths": sorted(p for p in paths | {metrics} if p),
                "config": {k: v for k, v in env.items() if isinstance(v, str) and v != "(secret)"},
                "port_names": set(ports),
            }
    for role in ("api", "worker"):
        if role not in seen_roles:
            problem(f"{name}: no {role} Deployment")
    if not any(d["kind"] == "Job" for d in docs):
        problem(f"{name}: no migrate Job")
    for obj in docs:
        if obj["kind"] == "PodMonitor":
            for endpoint in obj["spec"]["podMetricsEndpoints"]:
                for role in ("api", "worker"):
                    if endpoint.get("port") not in seen_roles.get(role, {}).get("port_names", set()):
                        problem(f"{name}: PodMonitor port {endpoint.get('port')} is not a port of the {role}")
                if role in seen_roles:
                    seen_roles[role]["paths"] = sorted(set(seen_roles[role]["paths"]) | {endpoint.get("path", "/metrics")})
    return seen_roles


def check_compose(path: Path, prometheus: Path, readme_names: set[str]) -> None:
    compose = yaml.safe_load(path.read_text(encoding="utf-8"))
    services = compose["services"]
    workers = []
    for name, service in services.items():
        if service.get("image") != "qiwu-scheduler:local":
            continue
        where = f"{path.name}: service {name}"
        env = service.get("environment", {})
        for var in sorted(env):
            if var not in readme_names:
                problem(f"{where}: {var} is not a variable of the README's configuration table")
        role = service["command"][0]
        for var in sorted(REQUIRED.get(role, set()) - {"QIWU_WEBHOOK_SECRET"} - set(env)):
            problem(f"{where}: {var} is not set")
        if role == "worker":
            workers.append(name)
        if role in ("api", "worker"):
            test = service.get("healthcheck", {}).get("test", [])
            if (len(test) != 4 or test[0] != "CMD" or not test[1].endswith("/qiwu-scheduler")
                    or test[2:] != ["healthcheck", "--ready"]):
                problem(f"{where}: the health check is not `qiwu-scheduler healthcheck --ready`")
        grace = service.get("stop_grace_period", "10s")
        if int(grace.rstrip("s")) <= HANDLER_GRACE_S + EXIT_MARGIN_S:
            problem(f"{where}: stop_grace_period {grace} is not longer than the handler grace")
    if len(workers) < 2:
        problem(f"{path.name}: fewer than two workers")
    config = yaml.safe_load(prometheus.read_text(encoding="utf-8"))
    targets = {t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    wanted = {f"{name}:8080" for name in ["api", *workers]}
    if targets != wanted:
        problem(f"{prometheus.name}: scrapes {sorted(targets)}, the Compose services are {sorted(wanted)}")


# ---- the live check: the real binary answers the manifests' paths ----------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


def wait_until(what: str, check, limit_s: float = 60) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    problem(f"live check: {what} within {limit_s:.0f} s")
    raise TimeoutError(what)


def live_check(binary: Path, roles: dict, postgres: str, redis: str) -> None:
    name = f"qiwu_deploy_{secrets.token_hex(4)}"
    subprocess.run(["psql", f"{postgres}/postgres", "-qc", f"CREATE DATABASE {name}"], check=True)
    procs: list[subprocess.Popen] = []
    try:
        base_env = {
            "PATH": os.environ.get("PATH", ""),
            "QIWU_DATABASE_URL": f"{postgres}/{name}",
            "QIWU_REDIS_URL": redis,
            "QIWU_JWT_SECRET": secrets.token_hex(16),
            "RUST_LOG": "warn",
        }
        subprocess.run([str(binary), "migrate"], env=base_env, check=True, stdout=subprocess.DEVNULL)
        for role in ("api", "worker"):
            # The rendered ConfigMap's values, on a free loopback port: the
            # manifests' own port is checked against QIWU_LISTEN above.
            config = {k: v for k, v in roles[role]["config"].items() if k != "QIWU_LISTEN"}
            port = free_port()
            env = {**config, **base_env, "QIWU_LISTEN": f"127.0.0.1:{port}",
                   "QIWU_INSTANCE_ID": f"deploy-check-{role}"}
            proc = subprocess.Popen([str(binary), role], env=env, stdout=subprocess.DEVNULL)
            procs.append(proc)
            wait_until(f"{role} answers /healthz", lambda: get(f"http://127.0.0.1:{port}/healthz") == 200)
            for path in roles[role]["paths"]:
                try:
                    wait_until(f"{role} answers 200 on {path}",
                               lambda: get(f"http://127.0.0.1:{port}{path}") == 200, 30)
                except TimeoutError:
                    continue
                print(f"check_deploy: {role} answers 200 on {path}")
            hc = subprocess.run([str(binary), "healthcheck", "--ready"],
                                env={**env}, capture_output=True, text=True)
            if hc.returncode != 0:
                problem(f"live check: `healthcheck --ready` fails against the {role}: {hc.stderr.strip()}")
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                if proc.wait(timeout=20) != 0:
                    problem(f"live check: {proc.args[1]} did not exit 0 on SIGTERM")
            except subprocess.TimeoutExpired:
                proc.kill()
                problem(f"live check: {proc.args[1]} did not stop within 20 s of SIGTERM")
        subprocess.run(["psql", f"{postgres}/postgres", "-qc",
                        f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"], check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, required=True, help="the repository")
    parser.add_argument("--rendered", type=Path, nargs="+", required=True,
                        help="`kubectl kustomize` output of each overlay")
    parser.add_argument("--binary", type=Path, required=True, help="the qiwu-scheduler binary")
    parser.add_argument("--postgres", default=os.environ.get("QIWU_TEST_POSTGRES_URL",
                                                            "postgres://postgres@127.0.0.1:5432"))
    parser.add_argument("--redis", default="redis://127.0.0.1:6379")
    args = parser.parse_args()

    names = readme_variables(args.root / "README.md")
    roles = {}
    for rendered in args.rendered:
        found = check_overlay(rendered.stem, load_rendered(rendered), names)
        roles = roles or found
    check_compose(args.root / "deploy/docker-compose.yml", args.root / "deploy/prometheus/prometheus.yml", names)
    if not problems:
        live_check(args.binary, roles, args.postgres, args.redis)
    for text in problems:
        print(f"check_deploy: {text}", file=sys.stderr)
    if problems:
        print(f"check_deploy: {len(problems)} problems", file=sys.stderr)
        return 1
    print(json.dumps({role: info["paths"] for role, info in roles.items()}))
    print("check_deploy: manifests, Compose file and binary agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
