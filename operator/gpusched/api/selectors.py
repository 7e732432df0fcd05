"""What keeps a pod off a node, as the kube-scheduler reads it: taints and tolerations, node
selector terms (node affinity), each validated the way the API server would."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

from pydantic import Field, field_validator, model_validator

from gpusched.api.errors import field_error
from gpusched.api.meta import K8sModel
from gpusched.api.quantity import parse_int64

_NO_SCHEDULE_EFFECTS = ("NoSchedule", "NoExecute")


TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class Taint(K8sModel):
    key: str = Field(min_length=1)
    value: str = ""
    effect: TaintEffect


class Toleration(K8sModel):
    """A pod's toleration. An empty ``key`` or ``effect`` is read as ``None`` (meaning "any"),
    an empty ``operator`` as ``Equal``, exactly as the API server defaults them."""

    key: str | None = None
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str | None = None
    effect: TaintEffect | None = None
    toleration_seconds: int | None = Field(default=None, alias="tolerationSeconds")

    @field_validator("key", "effect", mode="before")
    @classmethod
    def _empty_is_any(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("operator", mode="before")
    @classmethod
    def _empty_is_equal(cls, value: object) -> object:
        return "Equal" if value in ("", None) else value

    @model_validator(mode="after")
    def _check_operator(self) -> Toleration:
        """API-server validation: a keyless toleration must be ``Exists`` (it would otherwise
        tolerate every taint with a given value, which nobody means), and ``Exists`` takes no
        value."""
        if self.key is None and self.operator == "Equal":
            raise field_error("must be Exists when key is empty", "operator")
        if self.operator == "Exists" and self.value:
            raise field_error("must be empty when operator is Exists", "value")
        return self

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' ``Toleration.ToleratesTaint``: effect and key match when given (or are
        empty, matching all), then ``Exists`` matches any value and ``Equal`` the same value."""
        if self.effect is not None and self.effect != taint.effect:
            return False
        if self.key is not None and self.key != taint.key:
            return False
        return self.operator == "Exists" or (self.value or "") == taint.value


def first_untolerated_taint(
    taints: Iterable[Taint],
    tolerations: Sequence[Toleration],
    effects: Iterable[str] = _NO_SCHEDULE_EFFECTS,
) -> Taint | None:
    """The first taint with one of ``effects`` that no toleration tolerates, or ``None``.

    By default only ``NoSchedule`` and ``NoExecute`` taints count, as in the kube-scheduler's
    TaintToleration filter (``PreferNoSchedule`` is a preference, not a filter). The taint is
    returned, not a bool, so the engine can say which taint kept a pod off a node.
    """
    wanted = set(effects)
    for taint in taints:
        if taint.effect in wanted and not any(tol.tolerates(taint) for tol in tolerations):
            return taint
    return None


# ---------------------------------------------------------------------------------------------
# Node affinity
# ---------------------------------------------------------------------------------------------

SelectorOperator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]


class NodeSelectorRequirement(K8sModel):
    """One ``matchExpressions`` (or ``matchFields``) entry, validated as the API server does."""

    key: str = Field(min_length=1)
    operator: SelectorOperator
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check_values(self) -> NodeSelectorRequirement:
        count = len(self.values)
        if self.operator in ("In", "NotIn") and count == 0:
            raise field_error(f"must not be empty when operator is {self.operator}", "values")
        if self.operator in ("Exists", "DoesNotExist") and count != 0:
            raise field_error(f"must be empty when operator is {self.operator}", "values")
        if self.operator in ("Gt", "Lt") and (count != 1 or parse_int64(self.values[0]) is None):
            raise field_error(
                f"must be exactly one integer when operator is {self.operator}", "values"
            )
        return self

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Label-selector semantics: ``NotIn`` and ``DoesNotExist`` match nodes without the
        label; ``Gt``/``Lt`` never match a missing or non-integer label."""
        present = self.key in labels
        match self.operator:
            case "In":
                return present and labels[self.key] in self.values
            case "NotIn":
                return not present or labels[self.key] not in self.values
            case "Exists":
                return present
            case "DoesNotExist":
                return not present
            case _:
                return present and self._compare(labels[self.key])

    def _compare(self, label: str) -> bool:
        actual = parse_int64(label)
        bound = parse_int64(self.values[0])
        if actual is None or bound is None:
            return False
        return actual > bound if self.operator == "Gt" else actual < bound


NODE_NAME_FIELD = "metadata.name"


class NodeSelectorTerm(K8sModel):
    """Requirements that must all hold. ``matchFields`` can only name ``metadata.name``."""

    match_expressions: list[NodeSelectorRequirement] = Field(
        default_factory=list, alias="matchExpressions"
    )
    match_fields: list[NodeSelectorRequirement] = Field(default_factory=list, alias="matchFields")

    @field_validator("match_fields")
    @classmethod
    def _only_node_name(
        cls, fields: list[NodeSelectorRequirement]
    ) -> list[NodeSelectorRequirement]:
        """The API server allows exactly ``metadata.name`` with ``In``/``NotIn`` and one value."""
        for index, field in enumerate(fields):
            if field.key != NODE_NAME_FIELD:
                raise field_error(f"must be {NODE_NAME_FIELD}", index, "key")
            if field.operator not in ("In", "NotIn"):
                raise field_error("must be In or NotIn for matchFields", index, "operator")
            if len(field.values) != 1:
                raise field_error("must be exactly one node name", index, "values")
        return fields

    def matches(self, labels: Mapping[str, str], node_name: str) -> bool:
        """All requirements ANDed. An empty term matches no node, as in Kubernetes (it is
        almost always a mistake, and matching everything would hide it)."""
        if not self.match_expressions and not self.match_fields:
            return False
        fields = {NODE_NAME_FIELD: node_name}
        return all(req.matches(labels) for req in self.match_expressions) and all(
            req.matches(fields) for req in self.match_fields
        )


def required_terms_match(
    terms: Sequence[NodeSelectorTerm], labels: Mapping[str, str], node_name: str
) -> bool:
    """Terms are ORed; no terms at all matches no node (the API server refuses an empty list)."""
    return any(term.matches(labels, node_name) for term in terms)
