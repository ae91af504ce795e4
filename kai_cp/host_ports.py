"""Host ports (spec 5.3: Kubernetes' NodePorts filter): two pods that ask for the same host port
and protocol never share a node; the kubelet refuses the second one.

A pod's host ports are exactly a required anti-affinity among the pods that want the same port,
per node, in every namespace, and symmetric. So they are expressed as such terms on synthetic
labels, and everything that already holds pod anti-affinity holds them too: the static node mask
against pods on nodes at cycle start (kai_cp/pod_affinity.py PodAffinityIndex), pods placed
earlier in the same cycle (the greedy walk's in-cycle exclusion, the model's anti_affinity
concern, at most one such pod a node), the pods' scheduling signatures and the classes that
aggregate them. A terminating pod keeps its port until it is gone, as in Kubernetes, so a pod
is not pipelined onto a node whose releasing pod holds its port.

Ports conflict by protocol and number alone: Kubernetes also lets two pods share a number on
distinct specific host IPs, which almost no workload uses; treating them as one is safe (it may
only keep such a pod off a node where it would have fitted).
"""

from __future__ import annotations

from typing import Any

from kai_cp.resources import SIDECAR_RESTART_POLICY

#: The synthetic topology key whose domains are single nodes (PodAffinityIndex.codes), so a
#: node without a hostname label is still one domain.
NODE_KEY = "kai-cp.internal/node"
#: Prefix of the synthetic labels a pod carries, one per host port it wants.
LABEL_PREFIX = "kai-cp.internal/host-port."
#: The reason Kubernetes' NodePorts filter gives.
REASON = "node(s) didn't have free ports for the requested pod ports"


def wanted(spec: Any) -> tuple[tuple[str, int], ...]:
    """(protocol, port) of every host port the pod asks for, sorted, each once: its containers'
    and its sidecars' (init containers with restartPolicy Always run with the pod; the others
    have exited before the containers start, and Kubernetes ignores their ports). With
    hostNetwork every container port is a host port (the API server defaults hostPort to it)."""
    if not spec.init_containers:           # most pods: one pass, nothing made
        for c in spec.containers or ():
            if c.ports:
                break
        else:
            return ()
    host_network = bool(getattr(spec, "host_network", None))
    out: set[tuple[str, int]] = set()
    containers = list(spec.containers or [])
    for c in spec.init_containers or ():
        if getattr(c, "restart_policy", None) == SIDECAR_RESTART_POLICY:
            containers.append(c)
    for c in containers:
        for p in c.ports or ():
            port = p.host_port or (p.container_port if host_network else None)
            if port and port > 0:
                out.add(((p.protocol or "TCP").upper(), int(port)))
    return tuple(sorted(out))


def label(protocol: str, port: int) -> str:
    return f"{LABEL_PREFIX}{protocol}-{port}"


def labels(ports: tuple[tuple[str, int], ...]) -> dict[str, str]:
    """The synthetic labels of a pod that wants `ports` (matched by the terms below)."""
    return {label(proto, port): "1" for proto, port in ports}


def ports_of(labels: dict[str, str]) -> list[tuple[str, int]]:
    """The (protocol, port) pairs a pod's labels say it holds: `labels` read back."""
    out = []
    for k in labels:
        if k.startswith(LABEL_PREFIX):
            proto, _, port = k[len(LABEL_PREFIX):].partition("-")
            out.append((proto, int(port)))
    return out


def is_port_term(term: Any) -> bool:
    return term.topology_key == NODE_KEY and len(term.match_labels) == 1 and \
        term.match_labels[0][0].startswith(LABEL_PREFIX)
