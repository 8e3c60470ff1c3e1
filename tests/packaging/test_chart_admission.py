"""The chart's ValidatingAdmissionPolicy (admissionPolicy.enabled): its CEL, exactly as
`helm template` renders it, evaluated with cel-python the way the API server evaluates a
policy (the variables in order, then each validation; its messageExpression when one is
false) against pods that must be admitted and pods that must be refused.
"""

from typing import Any

import pytest

from tests.support.helm import NAMESPACE, by_kind, render

celpy = pytest.importorskip("celpy", reason="pip install cel-python (evaluates the policy's CEL)")

TOLERATIONS = ("tolerate-missing-nri-plugins.noderesource.dev", "tolerate-missing-plugins.nri.io")
RECORDS = ("sla.nri.io/applied", "sla.nri.io/warnings")


def policy_objects(values: dict | None = None, **kwargs: str) -> tuple[dict, dict, list[dict]]:
    docs = render({"admissionPolicy": {"enabled": True, **(values or {})}}, **kwargs)
    return (
        by_kind(docs, "ValidatingAdmissionPolicy"),
        by_kind(docs, "ValidatingAdmissionPolicyBinding"),
        docs,
    )


def evaluate(expression: str, activation: dict[str, Any]) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(expression)).evaluate(activation)


def admit(policy: dict, pod: dict, namespace: str, operation: str = "CREATE") -> str | None:
    """None when the policy admits the pod, else the message the API server returns."""
    spec = policy["spec"]
    activation: dict[str, Any] = {
        "object": celpy.json_to_cel(pod),
        "request": celpy.json_to_cel(
            {
                "namespace": namespace,
                "operation": operation,
                "resource": {"group": "", "version": "v1", "resource": "pods"},
            }
        ),
    }
    variables = celpy.celtypes.MapType({})
    for variable in spec["variables"]:
        activation["variables"] = variables
        variables[celpy.celtypes.StringType(variable["name"])] = evaluate(
            variable["expression"], activation
        )
    activation["variables"] = variables
    for validation in spec["validations"]:
        if not evaluate(validation["expression"], activation):
            return str(evaluate(validation["messageExpression"], activation))
    return None


def pod(annotations: dict[str, str] | None = None) -> dict:
    metadata: dict[str, Any] = {"name": "p", "labels": {"app": "x"}}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def test_off_by_default():
    assert not {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} & {
        d["kind"] for d in render()
    }


def test_binding_denies_with_the_policy_on_pod_writes():
    policy, binding, _ = policy_objects()
    assert binding["spec"] == {
        "policyName": policy["metadata"]["name"],
        "validationActions": ["Deny"],
    }
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert policy["spec"]["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["pods"],
        }
    ]


@pytest.mark.parametrize(
    "annotations",
    [
        None,
        {},
        {"example.com/team": "a"},
        # what a pod author may set: an SLA, a per-pod required plugin
        {
            "sla.nri.io/pod": '{"cpu": {"exclusive": true}}',
            "sla.nri.io/enforcement": "hard",
            "required-plugins.noderesource.dev": '["nri-sla"]',
        },
        # a key that only begins like a reserved one
        {"sla.nri.io/applied-by": "x", "tolerate-missing-plugins.nri.io.example": "true"},
    ],
)
def test_tenant_pods_without_reserved_annotations_are_admitted(annotations):
    policy, _, _ = policy_objects()
    for operation in ("CREATE", "UPDATE"):
        assert admit(policy, pod(annotations), "tenant", operation) is None


@pytest.mark.parametrize(
    "key",
    [
        *TOLERATIONS,
        *RECORDS,
        "tolerate-missing-nri-plugins.noderesource.dev/pod",
        "tolerate-missing-plugins.nri.io/container.app",
        "sla.nri.io/applied/container.app",
    ],
)
def test_tenant_pods_with_a_reserved_annotation_are_refused(key):
    policy, _, _ = policy_objects({"allowedNamespaces": ["calico-system"]})
    annotations = {"example.com/team": "a", key: "true"}
    for operation in ("CREATE", "UPDATE"):
        assert admit(policy, pod(annotations), "tenant", operation) == (
            f"pod annotation {key} is reserved: only pods in namespaces kube-system, "
            "calico-system may carry it (nri-sla admission policy)"
        )
    # the same pod where the operator allows it
    for namespace in (NAMESPACE, "calico-system"):
        assert admit(policy, pod(annotations), namespace) is None


def test_the_release_namespace_is_always_allowed_and_only_it_by_default():
    policy, _, docs = policy_objects(namespace="nri-sla-system")
    tolerating = pod({TOLERATIONS[0]: "true"})
    assert admit(policy, tolerating, "nri-sla-system") is None
    assert admit(policy, tolerating, "kube-system") is not None  # not listed: refused
    # the chart's own pods carry both toleration keys and are admitted
    template = by_kind(docs, "DaemonSet")["spec"]["template"]
    own = {"apiVersion": "v1", "kind": "Pod", **template}
    assert set(TOLERATIONS) <= set(own["metadata"]["annotations"])
    assert admit(policy, own, "nri-sla-system") is None
    assert admit(policy, own, "tenant") is not None
