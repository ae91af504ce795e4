"""A pod's PersistentVolumeClaims (spec 5.3: Kubernetes' VolumeBinding pre-filter): a pod whose
claim is missing, being deleted, lost, not made for it, or unbound in a class that binds at
once, is not schedulable until that changes; the reason is Kubernetes' own.

Why: a pod bound with such a claim waits on its node forever (the kubelet cannot mount the
volume), holding the resources the scheduler gave it, and a claim that binds at once may bind
a volume another zone holds. KAI runs Kubernetes' plugin; kai-cp checks what the snapshot shows.

Which node a bound claim's volume allows needs the PersistentVolumes, which KAI's snapshot
does not hold; those claims pass here, as do unbound claims whose class binds when the pod is
placed (WaitForFirstConsumer: the provisioner follows the pod).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

#: Where the state records the problem of a pending pod (TaskInfo.volume_problem), and the
#: pre-filter's name in KAI's message.
PLUGIN = "VolumeBinding"
IMMEDIATE_UNBOUND = "pod has unbound immediate PersistentVolumeClaims"
_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"     # read before spec.storageClassName, as Kubernetes does
_WAIT = "WaitForFirstConsumer"


def _get(obj: Any, *path: str) -> Any:
    for k in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(k)
    return obj


def claim_names(pod: Any) -> list[tuple[str, bool]]:
    """(claim name, ephemeral) per volume of the pod that is a claim, in volume order. A generic
    ephemeral volume's claim is named `<pod>-<volume>` (Kubernetes' ephemeral.VolumeClaimName)."""
    out = []
    for v in getattr(pod.spec, "volumes", None) or ():
        if not isinstance(v, Mapping):
            continue
        name = _get(v, "persistentVolumeClaim", "claimName")
        if name:
            out.append((str(name), False))
        elif isinstance(v.get("ephemeral"), Mapping) and v.get("name"):
            out.append((f"{pod.metadata.name}-{v['name']}", True))
    return out


class VolumeIndex:
    """The snapshot's claims and storage classes, and the problem of a pod's claims."""

    def __init__(self, claims: Iterable[Any], classes: Iterable[Any]):
        self.claims: dict[tuple[str, str], Mapping] = {}
        for c in claims:
            meta = _get(c, "metadata") or {}
            if meta.get("name"):
                self.claims[(meta.get("namespace") or "default", meta["name"])] = c
        self.classes: dict[str, Mapping] = {}
        for c in classes:
            name = _get(c, "metadata", "name")
            if name:
                self.classes[name] = c

    def problem(self, pod: Any) -> str | None:
        """Kubernetes' VolumeBinding pre-filter error for the pod (None: it passes). Only for
        pods with claims; the caller skips the check where the snapshot holds no claims at all
        (a snapshot written without them, not a cluster whose every claim is gone)."""
        names = claim_names(pod)
        if not names:
            return None
        namespace = pod.metadata.namespace or "default"
        immediate = False
        for name, ephemeral in names:
            pvc = self.claims.get((namespace, name))
            if pvc is None:
                return (f"waiting for ephemeral volume controller to create the persistentvolumeclaim \"{name}\""
                        if ephemeral else f"persistentvolumeclaim \"{name}\" not found")
            if _get(pvc, "status", "phase") == "Lost":
                return (f"persistentvolumeclaim \"{name}\" bound to non-existent persistentvolume "
                        f"\"{_get(pvc, 'spec', 'volumeName') or ''}\"")
            if _get(pvc, "metadata", "deletionTimestamp"):
                return f"persistentvolumeclaim \"{name}\" is being deleted"
            if ephemeral and not self._owned_by(pvc, pod):
                return f"PVC {namespace}/{name} was not created for pod {namespace}/{pod.metadata.name} (pod is not owner)"
            if not _get(pvc, "spec", "volumeName"):
                why = self._unbound(pvc)
                if why is not None:
                    return why
                immediate = immediate or not self._delayed(pvc)
        return IMMEDIATE_UNBOUND if immediate else None

    @staticmethod
    def _owned_by(pvc: Mapping, pod: Any) -> bool:
        uid = pod.metadata.uid
        return any(isinstance(o, Mapping) and o.get("controller") and o.get("uid") == uid
                   for o in _get(pvc, "metadata", "ownerReferences") or ())

    @staticmethod
    def _class_of(pvc: Mapping) -> str:
        ann = _get(pvc, "metadata", "annotations") or {}
        return str(ann.get(_CLASS_ANNOTATION) or _get(pvc, "spec", "storageClassName") or "")

    def _unbound(self, pvc: Mapping) -> str | None:
        """An unbound claim whose class the snapshot lacks (where it holds classes at all)."""
        cls = self._class_of(pvc)
        if cls and self.classes and cls not in self.classes:
            return f"storageclass.storage.k8s.io \"{cls}\" not found"
        return None

    def _delayed(self, pvc: Mapping) -> bool:
        """Bound when its pod is placed (WaitForFirstConsumer). A claim of no class binds to a
        volume at once; one whose class is unknown (no classes in the snapshot) is taken as
        delayed, so missing data never blocks a pod."""
        cls = self._class_of(pvc)
        if not cls:
            return False
        sc = self.classes.get(cls)
        return sc is None or sc.get("volumeBindingMode") == _WAIT
