"""Names and label keys, by the rules of ``k8s.io/apimachinery/pkg/util/validation``, so that
what we accept the API server accepts too."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
DNS_LABEL_MAX = 63
DNS_SUBDOMAIN_MAX = 253
LABEL_KEY_MAX = DNS_SUBDOMAIN_MAX + 1 + DNS_LABEL_MAX
"""A label key is ``[prefix/]name``: a subdomain prefix, a slash and a 63-character name."""


def check_dns_label(value: str) -> str:
    """Template names become part of object names, so they follow RFC 1123 label rules."""
    if len(value) > DNS_LABEL_MAX or not _DNS_LABEL.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a DNS-1123 label (lower-case letters, digits and '-', "
            f"starting and ending with a letter or digit, at most {DNS_LABEL_MAX} characters)"
        )
    return value


def check_dns_subdomain(value: str) -> str:
    """Object names: RFC 1123 subdomain, as the API server requires for custom resources."""
    if len(value) > DNS_SUBDOMAIN_MAX or not _DNS_SUBDOMAIN.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', "
            f"starting and ending with a letter or digit, at most {DNS_SUBDOMAIN_MAX} characters)"
        )
    return value


def check_label_key(value: str) -> str:
    """Topology keys are node label keys; one the API server would refuse can match no node."""
    if len(value) > LABEL_KEY_MAX:
        raise ValueError(f"label key is longer than {LABEL_KEY_MAX} characters")
    prefix, slash, name = value.rpartition("/")
    if slash and (
        not prefix
        or len(prefix) > DNS_SUBDOMAIN_MAX
        or not _DNS_SUBDOMAIN.fullmatch(prefix)
        or "/" in prefix
    ):
        raise ValueError(f"{value!r}: the prefix before '/' must be a DNS-1123 subdomain")
    if len(name) > DNS_LABEL_MAX or not _QUALIFIED_NAME.fullmatch(name):
        raise ValueError(
            f"{value!r} is not a qualified label key (name part: letters, digits, '-', '_' and "
            f"'.', starting and ending with a letter or digit, at most {DNS_LABEL_MAX} characters)"
        )
    return value


DnsLabel = Annotated[str, AfterValidator(check_dns_label)]
DnsSubdomain = Annotated[str, AfterValidator(check_dns_subdomain)]
LabelKey = Annotated[str, AfterValidator(check_label_key)]
