"""Renders deploy/k8s's kustomizations the way `kubectl kustomize` (kustomize v5) does, for
exactly the features they use, and refuses any other (NotImplementedError naming it):
`resources` (files and folders of other kustomizations), `namespace`, `images` (newName,
newTag), `configMapGenerator` with `files` and `generatorOptions` (labels,
disableNameSuffixHash: true; the content hash kustomize would append otherwise is not
computed) and `patches` whose file is a strategic-merge patch of one resource named in it.
Neither Debian 12 nor PyPI ships kustomize (Debian's kubernetes-client is 1.20, whose
kustomize predates `patches`), so the schema checks render with this; where a `kubectl` is on
PATH, k8s_schema_test compares this renderer's objects with its `kubectl kustomize`'s."""

import copy
import os

import yaml

KNOWN_KEYS = {"apiVersion", "kind", "namespace", "resources", "images", "configMapGenerator",
              "generatorOptions", "patches"}
# Kinds without a namespace among those a kustomization here could hold.
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                  "PersistentVolume", "StorageClass", "PriorityClass", "IngressClass",
                  "ClusterServingRuntime", "ValidatingWebhookConfiguration",
                  "MutatingWebhookConfiguration"}
# Strategic-merge keys of the Kubernetes lists a patch here can reach (patchMergeKey in the API);
# other lists are replaced by the patch's, as strategic merge does for lists without one.
MERGE_KEYS = {"containers": "name", "initContainers": "name", "ephemeralContainers": "name",
              "volumes": "name", "volumeMounts": "mountPath", "env": "name",
              "ports": "containerPort", "imagePullSecrets": "name"}


def load_documents(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def strategic_merge(target, patch):
    """`patch` merged into `target` (both dicts) in place: maps recursively, null deletes,
    lists with a merge key merged by it, other lists replaced."""
    for key, value in patch.items():
        if key.startswith("$"):
            raise NotImplementedError(f"strategic-merge directive {key}")
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            strategic_merge(target[key], value)
        elif (isinstance(value, list) and key in MERGE_KEYS
              and isinstance(target.get(key), list)):
            merge_key = MERGE_KEYS[key]
            for item in value:
                if not isinstance(item, dict) or merge_key not in item:
                    raise NotImplementedError(f"list {key} item without its merge key {merge_key}")
                existing = [t for t in target[key] if t.get(merge_key) == item[merge_key]]
                if existing:
                    strategic_merge(existing[0], item)
                else:
                    target[key].append(copy.deepcopy(item))
        else:
            target[key] = copy.deepcopy(value)


def set_images(node, images):
    """The images transformer: every container image (any `containers` / `initContainers`
    list, custom resources' included) whose name is an entry's `name` gets its newName/newTag."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                for container in value:
                    if isinstance(container, dict) and "image" in container:
                        container["image"] = new_image(container["image"], images)
            set_images(value, images)
    elif isinstance(node, list):
        for item in node:
            set_images(item, images)


def new_image(image, images):
    name, tag = image, None
    if "@" in image:
        raise NotImplementedError(f"image by digest: {image}")
    slash = image.rfind("/")
    if image.rfind(":") > slash:
        name, tag = image.rsplit(":", 1)
    for entry in images:
        if entry["name"] != name:
            continue
        unknown = set(entry) - {"name", "newName", "newTag"}
        if unknown:
            raise NotImplementedError(f"images: {sorted(unknown)}")
        name = entry.get("newName", name)
        tag = str(entry["newTag"]) if "newTag" in entry else tag
    return f"{name}:{tag}" if tag is not None else name


def generated_configmaps(folder, kustomization):
    options = kustomization.get("generatorOptions", {})
    unknown = set(options) - {"labels", "disableNameSuffixHash"}
    if unknown:
        raise NotImplementedError(f"generatorOptions: {sorted(unknown)}")
    out = []
    for generator in kustomization.get("configMapGenerator", []):
        unknown = set(generator) - {"name", "files"}
        if unknown:
            raise NotImplementedError(f"configMapGenerator: {sorted(unknown)}")
        if not options.get("disableNameSuffixHash"):
            raise NotImplementedError("configMapGenerator with a name suffix hash")
        data = {}
        for entry in generator.get("files", []):
            key, _, source = entry.rpartition("=")
            with open(os.path.join(folder, source)) as f:
                data[key or os.path.basename(source)] = f.read()
        metadata = {"name": generator["name"]}
        if options.get("labels"):
            metadata["labels"] = dict(options["labels"])
        out.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data})
    return out


def render(folder):
    """The objects `kubectl kustomize folder` prints (in another order)."""
    kustomization = load_documents(os.path.join(folder, "kustomization.yaml"))[0]
    unknown = set(kustomization) - KNOWN_KEYS
    if unknown:
        raise NotImplementedError(f"{folder}: kustomization keys {sorted(unknown)}")
    objects = []
    for resource in kustomization.get("resources", []):
        path = os.path.normpath(os.path.join(folder, resource))
        objects += render(path) if os.path.isdir(path) else load_documents(path)
    objects += generated_configmaps(folder, kustomization)
    for patch in kustomization.get("patches", []):
        if set(patch) != {"path"}:
            raise NotImplementedError(f"{folder}: patches {sorted(set(patch) - {'path'})}")
        for document in load_documents(os.path.join(folder, patch["path"])):
            targets = [o for o in objects if o["kind"] == document["kind"]
                       and o["metadata"]["name"] == document["metadata"]["name"]]
            if len(targets) != 1:
                raise ValueError(f"{folder}: {patch['path']} matches {len(targets)} resources")
            strategic_merge(targets[0], document)
    if "namespace" in kustomization:
        for obj in objects:
            if obj["kind"] not in CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = kustomization["namespace"]
    if kustomization.get("images"):
        for obj in objects:
            set_images(obj, kustomization["images"])
    return objects


def kustomization_inputs(folder):
    """Paths of the files a kustomization reads itself (not those of folders it includes)."""
    kustomization = load_documents(os.path.join(folder, "kustomization.yaml"))[0]
    paths = [os.path.join(folder, "kustomization.yaml")]
    paths += [os.path.normpath(os.path.join(folder, r)) for r in kustomization.get("resources", [])]
    paths += [os.path.join(folder, p["path"]) for p in kustomization.get("patches", [])]
    for generator in kustomization.get("configMapGenerator", []):
        paths += [os.path.join(folder, e.rpartition("=")[2]) for e in generator.get("files", [])]
    return [p for p in paths if not os.path.isdir(p)]
